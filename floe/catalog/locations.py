"""Whether a pipe may still read its stage location: the storage-integration check.

CREATE STAGE and CREATE PIPE check a location against the stage's storage integration, but an
integration can be narrowed, disabled or dropped later. So whatever reads a stage on a user's
behalf checks again first: the Spark driver before every load (``pipeline.job``), and ``ALTER PIPE
... REFRESH`` before it lists the stage (``services.sql``). It lives here, in the core, so both
sides use the one function without ``services`` importing ``pipeline``.
"""

from __future__ import annotations

from floe.catalog.internal import is_internal
from floe.catalog.models import Pipe, Stage, StorageIntegration
from floe.catalog.store import Catalog
from floe.settings import Settings


def refusal(catalog: Catalog, settings: Settings, pipe: Pipe) -> str | None:
    """Why ``pipe`` may not read its stage any more, or None when it may.

    Checking at every read keeps the integration the bound of what Floe's credentials read on a
    user's behalf, whatever changed since the pipe was created.
    """
    if pipe.source == "streaming":
        return None  # its rows come from channels, not from a stage
    url, tables_bucket = pipe.stage_url, settings.pipeline.tables_bucket
    if pipe.bucket == tables_bucket:
        return f"Pipe {pipe.name} may not read Floe's tables bucket ({url})."
    if is_internal(url, settings):
        # An internal stage's own files, which Floe put there: no integration bounds them, and an
        # external stage never reaches this bucket (CREATE STAGE and the integrations refuse it).
        if pipe.storage_integration is not None:
            return f"Pipe {pipe.name} may not read Floe's internal stages bucket ({url}) as external."
        return None
    name = pipe.storage_integration
    if name is None:  # a pipe created before pipes recorded their integration
        stage = catalog.find(Stage, pipe.copy_spec.stage)
        name = stage.storage_integration if stage is not None else None
    if name is None:
        if settings.stages_without_integration:
            return None
        return (
            f"Stage {pipe.copy_spec.stage} ({url}) names no storage integration, and stages "
            "without one are not allowed (FLOE_STAGES_WITHOUT_INTEGRATION=false). Recreate the stage "
            "with STORAGE_INTEGRATION = <integration>, then the pipe."
        )
    integration = catalog.find(StorageIntegration, name)
    if integration is None:
        return f"Storage integration '{name}' of stage {pipe.copy_spec.stage} no longer exists."
    if not integration.enabled:
        return f"Storage integration '{name}' is disabled (ENABLED = FALSE); no file is read through it."
    if not integration.admits(url):
        return (
            f"URL '{url}' is no longer allowed by storage integration '{name}'. Please use DESC "
            "INTEGRATION to check out allowed and blocked locations."
        )
    return None
