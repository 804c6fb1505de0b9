"""Whether a pipe is stopped: an object its COPY was created on was dropped, replaced or altered.

A pipe is bound to the incarnations it was created on, as Snowflake binds a pipe to its objects by
their hidden ids rather than their names: its table (``Pipe.table_id``) and its stage
(``Pipe.stage_id``, and its URL and storage integration). When one of them is gone, or its name now
leads to another object, the pipe stops, in Snowflake's states (SYSTEM$PIPE_STATUS):

- ``STOPPED_MISSING_TABLE``: the target table was dropped (or replaced: the pipe's rows and load
  history belong to the table it loaded, so it never carries on into a new table of the name);
- ``STOPPED_STAGE_DROPPED``: the stage was dropped or replaced (CREATE OR REPLACE STAGE documents
  exactly this state), or, for ``@%t``, its table was;
- ``STOPPED_STAGE_ALTERED``: the stage is the same object but its URL or storage integration
  changed (ALTER STAGE), or a pipe made before stages had ids finds another URL under the name.

A stopped pipe loads nothing: the Spark source holds its queue back as it does a paused pipe's, so
the files stay queued (``pendingFileCount``) until ``CREATE OR REPLACE PIPE`` hands the ones on its
stage to the new pipe, or ``DROP PIPE`` discards them. Recreating the table or the stage does not
bring the pipe back: only recreating the pipe does (decision 84).

It lives in the core, with ``floe.catalog.locations``, because the API (SYSTEM$PIPE_STATUS, SHOW
PIPES, ALTER PIPE ... REFRESH) and the Spark job (the source, each micro-batch) ask the same question.
"""

from __future__ import annotations

from dataclasses import dataclass

from floe.catalog.internal import TABLE_PREFIX, TABLE_STAGE_MARK
from floe.catalog.models import Pipe, Stage, Table, split_s3_url
from floe.catalog.names import join_parts, split_parts
from floe.catalog.store import Catalog

STOPPED_MISSING_TABLE = "STOPPED_MISSING_TABLE"
STOPPED_STAGE_DROPPED = "STOPPED_STAGE_DROPPED"
STOPPED_STAGE_ALTERED = "STOPPED_STAGE_ALTERED"

_RECREATE = "Recreate the pipe (CREATE OR REPLACE PIPE) to load again"


@dataclass(frozen=True)
class Stopped:
    """Why a pipe is stopped: its executionState and the error SYSTEM$PIPE_STATUS shows with it."""

    state: str
    reason: str


def pipe_stopped(catalog: Catalog, pipe: Pipe) -> Stopped | None:
    """The state a pipe is stopped in, or None while the objects it was created on are there."""
    spec = pipe.copy_spec
    table = catalog.find(Table, spec.table)
    if table is None:
        return Stopped(
            STOPPED_MISSING_TABLE,
            f"Table '{spec.table}' does not exist: it was dropped after pipe {pipe.name} was created. "
            f"{_RECREATE}, once the table is there.",
        )
    if table.id != pipe.table_id:
        return Stopped(
            STOPPED_MISSING_TABLE,
            f"Table '{spec.table}' was replaced after pipe {pipe.name} was created; the pipe loaded the "
            f"table dropped then. {_RECREATE} into the new table.",
        )
    if pipe.source != "stage":
        return None  # a streaming pipe reads channels, not a stage
    *container, last = split_parts(spec.stage)
    if last.startswith(TABLE_STAGE_MARK):
        return _table_stage(catalog, pipe, join_parts(*container, last[len(TABLE_STAGE_MARK) :]))
    return _named_stage(pipe, catalog.find(Stage, spec.stage))


def _table_stage(catalog: Catalog, pipe: Pipe, name: str) -> Stopped | None:
    """A pipe reading ``@%t``: the stage is table ``t``'s incarnation's."""
    table = catalog.find(Table, name)
    if table is not None and split_s3_url(pipe.stage_url)[1] == f"{TABLE_PREFIX}{table.id}/":
        return None
    return Stopped(
        STOPPED_STAGE_DROPPED,
        f"The stage of table '{name}' (@%{name.rsplit('.', 1)[-1]}), which pipe {pipe.name} reads, was "
        f"dropped with its table. {_RECREATE}.",
    )


def _named_stage(pipe: Pipe, stage: Stage | None) -> Stopped | None:
    name = pipe.copy_spec.stage
    if stage is None:
        return Stopped(
            STOPPED_STAGE_DROPPED,
            f"Stage '{name}' does not exist: it was dropped after pipe {pipe.name} was created. "
            f"Recreate the stage, then the pipe (CREATE OR REPLACE PIPE).",
        )
    if pipe.stage_id is not None and stage.id is not None and stage.id != pipe.stage_id:
        return Stopped(
            STOPPED_STAGE_DROPPED,
            f"Stage '{name}' was dropped or replaced after pipe {pipe.name} was created; the stage of "
            f"that name now is another one. {_RECREATE} from it.",
        )
    if stage.internal and stage.url != pipe.stage_url:
        # An internal stage's location cannot be altered: another one is a stage made again (one
        # from before stages had ids, which the test above cannot tell).
        return Stopped(
            STOPPED_STAGE_DROPPED,
            f"Stage '{name}' was dropped or replaced after pipe {pipe.name} was created, and its files "
            f"with it. {_RECREATE} from the new stage.",
        )
    integration = pipe.storage_integration
    if stage.url != pipe.stage_url or (integration is not None and stage.storage_integration != integration):
        return Stopped(
            STOPPED_STAGE_ALTERED,
            f"The location of stage '{name}' (its URL or storage integration) changed after pipe "
            f"{pipe.name} was created. {_RECREATE} from the stage's new location.",
        )
    return None
