"""The registrar: the only writer of table manifests and terminal load history.

A pipe's share of a micro-batch commits in one Lua script keyed by (pipe, query id, batch id):
the blobs join the manifest, the files' states turn terminal, their queue entries are deleted and
a batch marker is set, all at once. Replaying the batch finds the marker and changes nothing, so a
crash anywhere around the commit neither loses nor doubles a file. A pipe incarnation that DROP or
CREATE OR REPLACE retired commits nothing: its queued files went to its successor (if any) when it
was retired, and the same script decides which of the two happened first.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any, cast

import redis

from floe.history import FileState
from floe.keys import Keys

# KEYS: 1 marker, 2 blobs hash, 3 status hash, 4 events stream, 5 queue stream, 6 retired flag, then
# one file key per file.
# ARGV: 1 ttl s, 2 now ms, 3 n blobs, then blob name/json pairs, then per file: path, state json, stream id.
# Returns 1 committed, 0 committed before (a replay), -1 the pipe incarnation is retired.
_COMMIT = """
if redis.call('EXISTS', KEYS[6]) == 1 then return -1 end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local ttl = tonumber(ARGV[1])
local now = ARGV[2]
local nblobs = tonumber(ARGV[3])
local i = 4
for _ = 1, nblobs do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  i = i + 2
end
local last_path = nil
for k = 7, #KEYS do
  local path, state, sid = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  redis.call('SET', KEYS[k], state, 'EX', ttl)
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', 10000, '*', 'path', path, 'time', now)
  if sid ~= '' then redis.call('XDEL', KEYS[5], sid) end
  last_path = path
  i = i + 3
end
if last_path then
  redis.call('HSET', KEYS[3], 'lastIngestedTimestamp', now, 'lastIngestedFilePath', last_path)
end
redis.call('SET', KEYS[1], now, 'EX', ttl)
return 1
"""


@dataclass
class PipeCommit:
    """What one pipe's share of a micro-batch commits."""

    pipe_id: str
    blobs: list[dict[str, Any]] = field(default_factory=list)
    files: list[tuple[FileState, str]] = field(default_factory=list)
    """(new state, queue stream id) per file."""


class Outcome(enum.Enum):
    """What a commit did."""

    COMMITTED = 1
    REPLAYED = 0
    """The batch had been committed by an earlier attempt; nothing changed."""
    RETIRED = -1
    """The pipe incarnation was dropped or replaced; nothing changed, and the batch's blobs are
    unreferenced."""


class Registrar:
    """Commits micro-batches to Redis."""

    def __init__(self, client: redis.Redis[bytes], keys: Keys, retention_seconds: int) -> None:
        self._r = client
        self._keys = keys
        self._ttl = retention_seconds
        self._script = client.register_script(_COMMIT)

    def committed(self, pipe_id: str, query_id: str, batch_id: int) -> bool:
        """Whether this pipe's share of the batch is already committed."""
        return bool(self._r.exists(self._keys.batch_marker(pipe_id, query_id, batch_id)))

    def commit(self, c: PipeCommit, query_id: str, batch_id: int, now_ms: int) -> Outcome:
        """Commit atomically, unless an earlier attempt did or the pipe incarnation is retired."""
        k = self._keys
        keys = [
            k.batch_marker(c.pipe_id, query_id, batch_id),
            k.blobs(c.pipe_id),
            k.status(c.pipe_id),
            k.events(c.pipe_id),
            k.queue(c.pipe_id),
            k.retired(c.pipe_id),
        ]
        args: list[str | int] = [self._ttl, now_ms, len(c.blobs)]
        for blob in c.blobs:
            args += [blob["name"], json.dumps(blob)]
        for state, sid in c.files:
            keys.append(k.file(c.pipe_id, state.path))
            args += [state.path, state.model_dump_json(), sid]
        return Outcome(int(cast(int, self._script(keys=keys, args=args))))
