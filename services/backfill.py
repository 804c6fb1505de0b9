"""Backfill, a Floe extension (as Databricks Auto Loader's ``backfillInterval``): a pipe with
``BACKFILL_INTERVAL`` has its location listed every interval, and the files no notification
announced are queued.

The listing is ALTER PIPE ... REFRESH's (``list_staged``), and so is the queueing script, without
REFRESH's second chance for failed loads (``Deduper.refresh(..., retry_failed=False)``): a file the
pipe has any state for, queued, loaded or failed, is left alone. So a backfill never queues a file
twice and never loads one again, whatever the notifications did meanwhile, and a file that fails
is not retried every interval (REFRESH does that, once, when asked).

Only files modified since the second the pipe was created are listed, and none older than 7 days
or half the dedup memory: older files were never the pipe's to be notified of (a CREATE OR
REPLACE's predecessor may have loaded them), and the pipe must still remember every file a backfill
could list. Each consumer process looks for due pipes every ``backfill.poll_s``; one lists a pipe
per interval, the one that sets the pipe's lease (``SET NX PX <interval>``). The lease is not
released: its expiry is the next interval's start, so a consumer that dies mid-listing only delays
that pipe to the next interval, and two listings that overlap (one slower than the interval) queue
each file once anyway, the script deciding per file.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from typing import Any

from floe.aws import AWS_ERRORS
from floe.aws import client as aws_client
from floe.catalog import Catalog, Pipe, now_ms
from floe.catalog.locations import refusal
from floe.catalog.stage_commands import stage_path
from floe.keys import Keys, RedisClient
from floe.metrics import FileFlow
from floe.settings import Settings
from services.dedup import Deduper, FileRef, PipeRetired, Refreshed

log = logging.getLogger("floe.backfill")

LISTING_WINDOW = dt.timedelta(days=7)
"""How far back a listing looks, by LAST_MODIFIED: Snowflake's 7 days for ALTER PIPE ... REFRESH
(MODIFIED_AFTER's default and its limit), which a backfill shares."""

# KEYS[1] the lease. ARGV[1] holder, ARGV[2] ms. 1 when this call took it.
_TAKE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
"""


LISTING_PAGE_KEYS = 1000
"""Keys per page of a listing: S3's largest page, and a REFRESH's unit of progress."""


def staged_pages(s3: Any, pipe: Pipe, prefix: str, since: dt.datetime) -> Iterator[list[FileRef]]:
    """The objects under the pipe's location plus ``prefix`` (a key prefix, appended to the pipe's
    path as Snowflake's PREFIX is) last modified at or after ``since`` that pass its PATTERN, as
    stage-relative paths with their sizes, in key order: a list per page of S3's listing (up to
    1,000 keys). S3's errors pass through; a ``prefix`` with a '.' or '..' segment is refused
    (CompilationError) before anything is listed."""
    stage_path(prefix, "ALTER PIPE ... REFRESH PREFIX")
    return _pages(s3, pipe, pipe.prefix + prefix.lstrip("/"), since)


def _pages(s3: Any, pipe: Pipe, key_prefix: str, since: dt.datetime) -> Iterator[list[FileRef]]:
    """``staged_pages``, of a prefix already checked."""
    paging = {"PageSize": LISTING_PAGE_KEYS}
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=pipe.bucket, Prefix=key_prefix, PaginationConfig=paging
    ):
        files: list[FileRef] = []
        for obj in page.get("Contents", ()):
            rel = pipe.relative_path(obj["Key"])
            if obj["LastModified"] >= since and rel is not None and pipe.matches(rel):
                files.append(FileRef(rel, int(obj["Size"])))
        yield files


def list_staged(s3: Any, pipe: Pipe, prefix: str, since: dt.datetime) -> list[FileRef]:
    """Every file of ``staged_pages``."""
    return [f for page in staged_pages(s3, pipe, prefix, since) for f in page]


def backfill_since(pipe: Pipe, now: dt.datetime, retention_s: int) -> dt.datetime:
    """The oldest LAST_MODIFIED a backfill of ``pipe`` at ``now`` lists: the second the pipe was
    created, but never more than ``LISTING_WINDOW`` back, nor more than half the dedup memory (so
    every file it lists that the pipe saw is still remembered, and skipped)."""
    window = min(LISTING_WINDOW, dt.timedelta(seconds=retention_s / 2))
    # S3 lists LAST_MODIFIED in whole seconds: a file written in the second the pipe was created,
    # after it, lists as older than the creation.
    created = dt.datetime.fromtimestamp(pipe.created_ms // 1000, tz=dt.UTC)
    return max(now - window, created)


class Backfiller:
    """Lists the pipes whose backfill is due and queues what they missed; one per consumer process."""

    def __init__(
        self,
        settings: Settings,
        client: RedisClient,
        catalog: Catalog,
        holder: str,
        flow: FileFlow | None = None,
    ) -> None:
        self.settings = settings
        self.keys = Keys(settings.redis.prefix)
        self.redis = client
        self.catalog = catalog
        self.holder = holder
        """Names this process in the leases it takes."""
        self.deduper = Deduper(client, self.keys, settings.retention_seconds, flow)
        """Queues what a listing found missing, counted on the consumer's ``flow``."""
        self._take = client.register_script(_TAKE)
        self._s3: Any = None

    def close(self) -> None:
        """Close the S3 client's connections."""
        if self._s3 is not None:
            self._s3.close()
            self._s3 = None

    def interval_s(self, pipe: Pipe) -> int:
        """How often ``pipe`` is listed: its BACKFILL_INTERVAL, but not more often than the setting's
        minimum (a pipe made under other settings)."""
        return max(pipe.backfill_interval_s or 0, self.settings.backfill.min_interval_s)

    def run_once(self) -> dict[str, int]:
        """Backfill each pipe whose interval has come and whose lease this process took; pipe name
        -> files queued. A pipe whose backfill fails is logged and tried again next interval."""
        done: dict[str, int] = {}
        for pipe in self.catalog.all(Pipe).values():
            if pipe.backfill_interval_s is None or pipe.source != "stage":
                continue
            lease = self.keys.lease(pipe.id, "backfill")
            if not self._take(keys=[lease], args=[self.holder, self.interval_s(pipe) * 1000]):
                continue
            try:
                done[pipe.name] = len(self.backfill(pipe))
            except AWS_ERRORS as exc:
                log.warning(
                    "backfill could not list the stage; next interval tries again: %s",
                    exc,
                    extra={"pipe": pipe.name},
                )
        return done

    def backfill(self, pipe: Pipe, now: dt.datetime | None = None) -> list[FileRef]:
        """List ``pipe``'s location and queue the files it has no state for; the ones queued."""
        if (reason := refusal(self.catalog, self.settings, pipe)) is not None:
            # Floe's credentials list nothing the pipe's integration does not admit any more.
            log.warning("backfill skipped: %s", reason, extra={"pipe": pipe.name})
            return []
        now = now or dt.datetime.fromtimestamp(now_ms() / 1000, tz=dt.UTC)
        if self._s3 is None:
            self._s3 = aws_client(self.settings.aws, "s3")
        files = list_staged(self._s3, pipe, "", backfill_since(pipe, now, self.settings.retention_seconds))
        try:
            flags = self.deduper.refresh(pipe, files, source="backfill", retry_failed=False)
        except PipeRetired:
            log.info(
                "backfill dropped: the pipe was dropped or replaced meanwhile", extra={"pipe": pipe.name}
            )
            return []
        queued = [f for f, r in zip(files, flags, strict=True) if r is not Refreshed.SKIPPED]
        log.info("backfill listed %d files, queued %d", len(files), len(queued), extra={"pipe": pipe.name})
        return queued
