"""One timed producer of the ``sdk`` part (bench/sdk.py), in a process of its own.

    python -m bench.sdk_worker '<json>'

The JSON names the client (``floe``: ``floe.streaming``; ``sdk``: Snowflake's ``snowpipe-streaming``),
its properties, the pipe, the channels, and the rows (``bench.streaming.stream_rows`` of a seed), so
both clients append the very same rows. The worker makes the rows, opens the client and its channels
and prints ``{"ready": true}``; on a line on stdin it appends every row, ``APPEND_ROWS`` per call,
round robin over the channels, each call's tokens the first and last offset of its rows in the
channel's slice; then it closes the client, which flushes what it buffered, and prints the
``time.monotonic()`` of the first append, of the last append's return and of the close's return.
CLOCK_MONOTONIC is one clock for every process on the machine, so the parent, which watches for the
commits, times the run from the first of these.

The SDK's native core keeps threads and process-wide settings (its TLS trust from ``SSL_CERT_FILE``,
its log target), which is why each run is a process; Floe's client is run the same way so that both
pay the same start and neither shares a process with the commit poller.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from bench.streaming import APPEND_ROWS, slices, stream_rows


def open_client(cfg: dict[str, Any]) -> Any:
    """The client ``cfg`` names, on its pipe."""
    args = (cfg["name"], cfg["db"], cfg["schema"], cfg["pipe"])
    if cfg["client"] == "sdk":
        from snowflake.ingest.streaming import StreamingIngestClient as Sdk

        return Sdk(*args, properties=cfg["properties"])
    from floe.streaming import StreamingIngestClient

    return StreamingIngestClient(*args, properties=cfg["properties"])


def main(argv: list[str]) -> int:
    cfg: dict[str, Any] = json.loads(argv[1])
    rows = stream_rows(0, cfg["rows"], cfg["seed"])
    pieces = slices(len(rows), len(cfg["channels"]))
    client = open_client(cfg)
    channels = [client.open_channel(name)[0] for name in cfg["channels"]]
    plan = [(ch, piece) for ch, piece in zip(channels, pieces, strict=True) if len(piece)]
    rounds = max((len(piece) + APPEND_ROWS - 1) // APPEND_ROWS for _, piece in plan)
    print(json.dumps({"ready": True}), flush=True)
    sys.stdin.readline()
    t0 = time.monotonic()
    for r in range(rounds):
        for ch, piece in plan:
            lo = r * APPEND_ROWS
            if lo < len(piece):
                hi = min(len(piece), lo + APPEND_ROWS)
                ch.append_rows(rows[piece.start + lo : piece.start + hi], str(lo), str(hi - 1))
    appended = time.monotonic()
    client.close(wait_for_flush=True, timeout_seconds=cfg["timeout_s"])
    flushed = time.monotonic()
    print(json.dumps({"t0": t0, "appended": appended, "flushed": flushed}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
