"""The Redis key layout. Every key Floe writes is named here and nowhere else.

Keys that one atomic step touches share a hash tag (``{...}``) so the same scripts run on Redis
Cluster: the catalog lives under ``{catalog}``; everything about one pipe incarnation (its queue,
file states, load history, committed blobs and batch markers) lives under ``{p:<pipe id>}``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Keys:
    """Key names under one prefix."""

    prefix: str

    # -- catalog -------------------------------------------------------------------------------
    def objects(self, kind: str) -> str:
        """Hash name -> JSON of every stage, table, pipe, user or role."""
        return f"{self.prefix}:{{catalog}}:{kind}"

    def table_segments(self, table_id: str) -> str:
        """Set of pipe ids whose committed blobs make up a table incarnation."""
        return f"{self.prefix}:{{catalog}}:segments:{table_id}"

    def catalog_version(self) -> str:
        """Counter bumped on every DDL, so readers can cache the catalog."""
        return f"{self.prefix}:{{catalog}}:version"

    # -- per pipe ------------------------------------------------------------------------------
    def _pipe(self, pipe_id: str) -> str:
        return f"{self.prefix}:{{p:{pipe_id}}}"

    def queue(self, pipe_id: str) -> str:
        """Redis Stream of files waiting to load (the Spark source reads it)."""
        return f"{self._pipe(pipe_id)}:queue"

    def file(self, pipe_id: str, path: str) -> str:
        """JSON state of one (pipe, path); its existence is the 14-day dedup memory."""
        return f"{self._pipe(pipe_id)}:file:{path}"

    def history(self, pipe_id: str) -> str:
        """Sorted set of paths by received time (ms): the load-history index."""
        return f"{self._pipe(pipe_id)}:history"

    def events(self, pipe_id: str) -> str:
        """Stream of recent load events (insertReport reads it)."""
        return f"{self._pipe(pipe_id)}:events"

    def blobs(self, pipe_id: str) -> str:
        """Hash blob name -> JSON manifest entry (path, row count, column statistics)."""
        return f"{self._pipe(pipe_id)}:blobs"

    def batch_marker(self, pipe_id: str, query_id: str, batch_id: int) -> str:
        """Exists once the registrar committed this pipe's share of a micro-batch."""
        return f"{self._pipe(pipe_id)}:commit:{query_id}:{batch_id}"

    def status(self, pipe_id: str) -> str:
        """Hash of pipe runtime facts (last ingested file and time, last error)."""
        return f"{self._pipe(pipe_id)}:status"

    def retired(self, pipe_id: str) -> str:
        """Set when DROP or CREATE OR REPLACE retires a pipe incarnation; the registrar then refuses
        its commits, so a batch in flight at that moment never becomes visible."""
        return f"{self._pipe(pipe_id)}:retired"

    # -- per pipe: streaming channels (Snowpipe Streaming) ----------------------------------
    def channel(self, pipe_id: str, name: str) -> str:
        """Hash of one channel's state: incarnation, sequencers, committed offset token, counters."""
        return f"{self._pipe(pipe_id)}:channel:{name}"

    def channels(self, pipe_id: str) -> str:
        """Sorted set of the pipe's channel names by last activity (ms): listing and expiry."""
        return f"{self._pipe(pipe_id)}:channels"

    def rows(self, pipe_id: str) -> str:
        """Redis Stream of accepted appends waiting to load (the Spark source reads it)."""
        return f"{self._pipe(pipe_id)}:rows"

    def row_data(self, pipe_id: str, channel: str, incarnation: str, client_seq: int, row_seq: int) -> str:
        """The NDJSON rows of one accepted append, deleted by the commit that settles it."""
        return f"{self._pipe(pipe_id)}:rowdata:{incarnation}:{client_seq}:{row_seq}:{channel}"

    def pipe_pattern(self, pipe_id: str) -> str:
        """Glob over every key of one pipe (for DROP PIPE)."""
        return f"{self._pipe(pipe_id)}:*"

    # -- external functions --------------------------------------------------------------------
    def breakers(self) -> str:
        """Hash of remote services whose circuit breaker is not closed -> their last trip (JSON)."""
        return f"{self.prefix}:{{breakers}}"

    # -- processes -----------------------------------------------------------------------------
    def heartbeat(self, component: str) -> str:
        """Hash of live processes of a component -> last heartbeat (ms)."""
        return f"{self.prefix}:{{proc}}:{component}"
