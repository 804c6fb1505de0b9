"""Which privileges a stage takes: USAGE an external stage, READ and WRITE an internal one.

Snowflake's GRANT usage notes: "For stages: USAGE only applies to external stages. READ | WRITE only
applies to internal stages. In addition, to grant the WRITE privilege on an internal stage, the READ
privilege must first be granted on the stage." Its privileges page adds the mirror rule for REVOKE
(WRITE goes before or with READ) and that ALL [PRIVILEGES] "grants all applicable privileges ... on
the stage (internal or external)". These are the checks ``services.grants`` makes before it stores a
grant on a stage, a bulk grant on ALL STAGES, or a FUTURE STAGES grant; each is a pure function of
the stage and the privileges the grantee already holds (decision 84).

A table's stage (``@%t``) and a user's stage (``@~``) are not securable objects: GRANT cannot name
them (``floe.catalog.access`` reads only a stage name there), as Snowflake documents.
"""

from __future__ import annotations

from collections.abc import Iterable

from floe.catalog import Stage
from floe.errors import CompilationError

INTERNAL = ("READ", "WRITE")
"""An internal stage's privileges (besides OWNERSHIP)."""
EXTERNAL = ("USAGE",)
"""An external stage's privileges (besides OWNERSHIP)."""
ORDER_CODE, ORDER_STATE = "003511", "23001"
"""Snowflake's code for a privilege order violation (quoted in snowflakedb/terraform-provider-snowflake
issues #1593 and #2911)."""


def stage_privileges(stage: Stage) -> tuple[str, ...]:
    """The privileges ``stage``'s kind takes."""
    return INTERNAL if stage.internal else EXTERNAL


def _kind(stage: Stage) -> str:
    return "internal" if stage.internal else "external"


def wrong_kind(stage: Stage, privileges: Iterable[str]) -> CompilationError:
    """A privilege the stage's kind does not take, and the ones it does."""
    words = list(privileges)
    takes = stage_privileges(stage)
    other = "an external stage's" if stage.internal else "an internal stage's"
    return CompilationError(
        f"invalid privilege '{', '.join(words)}' on {_kind(stage)} stage '{stage.name}': an {_kind(stage)} "
        f"stage takes {' and '.join(takes)} (ALL [PRIVILEGES] grants {'both' if len(takes) > 1 else 'it'}); "
        f"{' and '.join(words)} {'is' if len(words) == 1 else 'are'} {other}"
    )


def _order(what: str, verb: str) -> CompilationError:
    if verb == "GRANT":
        rule = "READ should be granted before/simultaneously with WRITE."
    else:
        rule = "WRITE should be revoked before/simultaneously with READ."
    return CompilationError(
        f"Privilege order violation for {what}. {rule}", code=ORDER_CODE, sql_state=ORDER_STATE
    )


def checked_grant(
    stage: Stage, privileges: list[str], all_privileges: bool, held: Iterable[str]
) -> list[str]:
    """The privileges ``GRANT ... ON STAGE`` gives the role, which holds ``held`` on it directly:
    ALL means the stage's kind's; one of the other kind is refused; WRITE on an internal stage
    needs READ granted before or with it."""
    applicable = stage_privileges(stage)
    if all_privileges:
        return list(applicable)
    wrong = [p for p in privileges if p not in applicable]
    if wrong:
        raise wrong_kind(stage, wrong)
    if "WRITE" in privileges and "READ" not in privileges and "READ" not in held:
        raise _order(f"stage '{stage.name}'", "GRANT")
    return privileges


def checked_revoke(
    stage: Stage, privileges: list[str], all_privileges: bool, held: Iterable[str]
) -> list[str]:
    """The privileges ``REVOKE ... ON STAGE`` takes from the role, which holds ``held`` on it: ALL
    is whatever it holds; a privilege of the other kind is refused unless the role holds it (a grant
    made before Floe checked kinds may still be revoked); READ goes only with or after WRITE."""
    held = set(held)
    if all_privileges:
        return [p for p in (*INTERNAL, *EXTERNAL) if p in held] or list(stage_privileges(stage))
    wrong = [p for p in privileges if p not in stage_privileges(stage) and p not in held]
    if wrong:
        raise wrong_kind(stage, wrong)
    if "READ" in privileges and "WRITE" not in privileges and "WRITE" in held:
        raise _order(f"stage '{stage.name}'", "REVOKE")
    return privileges


def applicable(stage: Stage, privileges: Iterable[str]) -> list[str]:
    """Of a bulk or future grant's privileges (ON ALL | FUTURE STAGES), the ones ``stage`` takes: a
    schema may hold stages of both kinds, and each gets what applies to it."""
    takes = stage_privileges(stage)
    return [p for p in privileges if p in takes]


def checked_bulk(stages: Iterable[tuple[Stage, Iterable[str]]], privileges: list[str]) -> None:
    """``GRANT ... ON ALL STAGES``: every internal stage it gives WRITE gets READ with it or has it
    already (``stages``: each stage with what the role holds on it); checked before any is granted."""
    if "WRITE" not in privileges or "READ" in privileges:
        return
    for stage, held in stages:
        if stage.internal and "READ" not in held:
            raise _order(f"stage '{stage.name}'", "GRANT")


def checked_future(privileges: list[str], held: Iterable[str], verb: str) -> None:
    """``GRANT | REVOKE ... ON FUTURE STAGES``: the future READ and WRITE keep Snowflake's order too
    (``held``: the future privileges the role has on stages of that container)."""
    held = set(held)
    if verb == "GRANT" and "WRITE" in privileges and "READ" not in privileges and "READ" not in held:
        raise _order("the future grants on stage", "GRANT")
    if verb == "REVOKE" and "READ" in privileges and "WRITE" not in privileges and "WRITE" in held:
        raise _order("the future grants on stage", "REVOKE")


def checked_bulk_revoke(stages: Iterable[tuple[Stage, Iterable[str]]], privileges: list[str]) -> None:
    """``REVOKE ... ON ALL STAGES``: READ goes only with or after WRITE on each internal stage the
    role holds WRITE on; checked before any is revoked."""
    if "READ" not in privileges or "WRITE" in privileges:
        return
    for stage, held in stages:
        if stage.internal and "WRITE" in held:
            raise _order(f"stage '{stage.name}'", "REVOKE")
