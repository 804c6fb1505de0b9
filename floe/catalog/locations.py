"""Whether a pipe may still read its stage location: the storage-integration check.

CREATE STAGE and CREATE PIPE check a location against the stage's storage integration, but an
integration can be narrowed, disabled or dropped later. So whatever reads a stage on a user's
behalf checks again first: the Spark driver before every load (``pipeline.job``), and ``ALTER PIPE
... REFRESH`` before it lists the stage (``services.sql``). It lives here, in the core, so both
sides use the one function without ``services`` importing ``pipeline``.

The job checks each file's object key as well (``key_refusal``), against the pipe's location and
the integration the driver found (``storage_integration``), just before it reads it.
"""

from __future__ import annotations

import posixpath

from floe.catalog.internal import is_internal
from floe.catalog.models import Pipe, Stage, StorageIntegration, has_dot_segment
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
    name = _integration_name(catalog, pipe)
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


def _integration_name(catalog: Catalog, pipe: Pipe) -> str | None:
    """The storage integration ``pipe``'s stage reads through, by name; None if it names none."""
    if pipe.storage_integration is not None:
        return pipe.storage_integration
    # A pipe created before pipes recorded their integration: its stage's.
    stage = catalog.find(Stage, pipe.copy_spec.stage)
    return stage.storage_integration if stage is not None else None


def storage_integration(catalog: Catalog, pipe: Pipe) -> StorageIntegration | None:
    """The storage integration ``pipe``'s stage reads through, or None (an internal stage, a stage
    without one, or one gone: ``refusal`` says whether the pipe may read at all)."""
    name = _integration_name(catalog, pipe)
    return catalog.find(StorageIntegration, name) if name is not None else None


def key_refusal(pipe: Pipe, path: str, integration: StorageIntegration | None) -> str | None:
    """Why the job may not read file ``path`` of ``pipe``, checked on the object key it would read;
    None when it may.

    The API refuses a path with a dot segment wherever a client names one (decisions 108, 115), but
    the job checks again what it is about to read: pyarrow's S3 filesystem resolves dot segments
    (``in/../secret/x.csv`` reads ``secret/x.csv``), so a path that got past the API would read a
    file outside the stage and its integration's locations. The key must hold no dot segment, as
    written or percent-encoded (nor may the stage's URL), lie under the pipe's location once
    resolved, and lie inside ``integration``'s allowed locations and outside its blocked ones:
    ``refusal`` admitted the stage's URL, but a blocked folder may lie inside the stage.
    """
    key = pipe.object_key(path)
    if has_dot_segment(path):
        return (
            f"File '{path}' is not a file of stage {pipe.stage_url}: its path has a '.' or '..' segment "
            "(as written or percent-encoded), so it was not read."
        )
    # What a store that resolves paths reads, with '/' first so '..' cannot climb above the bucket.
    resolved = posixpath.normpath("/" + key.replace("\\", "/"))
    root = posixpath.normpath("/" + pipe.prefix).rstrip("/") + "/"
    if has_dot_segment(key) or not resolved.startswith(root):
        return (
            f"File '{path}' is not a file of stage {pipe.stage_url}: its object key '{key}' resolves "
            "outside the stage's location, so it was not read. Recreate the stage with a URL "
            "without '.' or '..' segments."
        )
    url = f"s3://{pipe.bucket}/{key}"
    if integration is not None and not integration.admits(url):
        return (
            f"File '{path}' ({url}) is not allowed by storage integration '{integration.name}'; it was "
            "not read. Please use DESC INTEGRATION to check out allowed and blocked locations."
        )
    return None
