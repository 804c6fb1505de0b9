"""A producer on Snowflake's official streaming SDK (``snowpipe-streaming``), driven by the test.

tests/e2e/test_streaming_sdk.py runs this file in a process of its own: the SDK's native core keeps
threads, a runtime and process-wide settings (its TLS trust from ``SSL_CERT_FILE``, its log target),
which must not live in the test's process. The test writes one JSON command per line on stdin; each
gets one JSON answer per line on stdout, ``{"ok": true, ...}`` or ``{"ok": false, "error": ...,
"code": ..., "http": ...}``. The SDK logs to stderr (``SS_LOG_TARGET=stderr``), so stdout carries
nothing else.

The SDK is used as a user writes it: a client per pipe (or per table with ``from_table``), channels
opened by name, ``append_rows`` with offset tokens, ``wait_for_commit``, statuses, and the elastic
channel. The rows a ``send`` makes are ``sent_rows``, which the test imports to know what the table
must hold; importing this module does not import the SDK.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

Command = dict[str, Any]


def sent_rows(channel: str, start: int, end: int) -> list[tuple[str, int, str]]:
    """(channel, offset, payload) of the rows a ``send`` appends for offsets ``start`` to ``end - 1``:
    the rows of tests/chaos/oracle.py's ``Sent``."""
    return [(channel, i, f"row {i} of {channel}") for i in range(start, end)]


def _rows(channel: str, start: int, end: int) -> list[dict[str, Any]]:
    return [{"ch": ch, "off": off, "payload": p} for ch, off, p in sent_rows(channel, start, end)]


def _status(status: Any) -> dict[str, Any]:
    """A ChannelStatus as JSON, by the SDK's public property names."""
    return {
        "channel": status.channel_name,
        "status_code": status.status_code,
        "committed": status.latest_committed_offset_token,
        "rows_inserted": status.rows_inserted_count,
        "rows_parsed": status.rows_parsed_count,
        "rows_error_count": status.rows_error_count,
        "last_error_offset_upper_bound": status.last_error_offset_token_upper_bound,
        "last_error_message": status.last_error_message,
        "last_error_timestamp": str(status.last_error_timestamp) if status.last_error_timestamp else None,
    }


class Producer:
    """One SDK client and its channels; ``handle`` runs one command."""

    def __init__(self) -> None:
        self.client: Any = None
        self.channels: dict[str, Any] = {}
        self.acks: dict[int, int] = {}
        """Elastic appends acknowledged: append token -> the SDK's retry count of its request."""

    def handle(self, cmd: Command) -> dict[str, Any]:
        op: Callable[[Command], dict[str, Any]] = getattr(self, f"op_{cmd['op']}")
        return op(cmd)

    def op_client(self, cmd: Command) -> dict[str, Any]:
        """A new client (the previous one closed without waiting for its buffers, as a crashed
        connector's would be): on a pipe, or with ``table`` on the table's default pipe."""
        from snowflake.ingest.streaming import StreamingIngestClient

        self._drop_client()
        props = cmd["properties"]
        if "table" in cmd:
            self.client = StreamingIngestClient.from_table(
                cmd["name"], cmd["db"], cmd["schema"], cmd["table"], properties=props
            )
        else:
            self.client = StreamingIngestClient(
                cmd["name"], cmd["db"], cmd["schema"], cmd["pipe"], properties=props
            )
        return {"pipe": self.client.pipe_name}

    def _drop_client(self) -> None:
        if self.client is not None:
            try:
                self.client.close(wait_for_flush=False, timeout_seconds=0)
            finally:
                self.client, self.channels = None, {}

    def op_open(self, cmd: Command) -> dict[str, Any]:
        channel, status = self.client.open_channel(cmd["channel"], cmd.get("offset_token"))
        self.channels[cmd["channel"]] = channel
        return _status(status)

    def op_send(self, cmd: Command) -> dict[str, Any]:
        """Append ``sent_rows`` from ``start`` to ``end`` in calls of ``batch`` rows, each call's
        tokens its first and last offset."""
        channel = self.channels[cmd["channel"]]
        for lo in range(cmd["start"], cmd["end"], cmd["batch"]):
            hi = min(lo + cmd["batch"], cmd["end"])
            channel.append_rows(_rows(cmd["channel"], lo, hi), str(lo), str(hi - 1))
        return {"sent": cmd["end"]}

    def op_append(self, cmd: Command) -> dict[str, Any]:
        """Append the rows given, with the tokens given."""
        self.channels[cmd["channel"]].append_rows(cmd["rows"], cmd.get("start"), cmd.get("end"))
        return {}

    def op_wait_commit(self, cmd: Command) -> dict[str, Any]:
        """Until the channel's committed token is ``token``."""
        channel = self.channels[cmd["channel"]]
        channel.wait_for_commit(lambda t: t == cmd["token"], cmd.get("timeout", 60))
        return {"committed": channel.get_latest_committed_offset_token()}

    def op_statuses(self, cmd: Command) -> dict[str, Any]:
        statuses = self.client.get_channel_statuses(cmd["channels"])
        tokens = self.client.get_latest_committed_offset_tokens(cmd["channels"])
        return {"statuses": {k: _status(v) for k, v in statuses.items()}, "tokens": tokens}

    def op_elastic(self, cmd: Command) -> dict[str, Any]:
        """``sent_rows`` of ``label`` from ``start`` to ``end`` through the elastic channel, ``batch``
        rows per append, each append's token its first offset; answers once every append is
        acknowledged, with the SDK's retry count of each."""
        elastic = self.client.get_elastic_channel()
        elastic.set_success_handler(self._acked)
        futures: list[Future[Any]] = []
        for lo in range(cmd["start"], cmd["end"], cmd["batch"]):
            hi = min(lo + cmd["batch"], cmd["end"])
            futures.append(elastic.append_rows_with_wait(_rows(cmd["label"], lo, hi), lo))
        for f in futures:
            f.result(cmd.get("timeout", 60))
        return {"acks": {str(k): v for k, v in sorted(self.acks.items())}}

    def _acked(self, detail: Any) -> None:
        # Runs on the SDK's acknowledgement task: bookkeeping only.
        for token in detail.append_tokens:
            self.acks[int(token)] = max(self.acks.get(int(token), 0), int(detail.retry_count))

    def op_close(self, cmd: Command) -> dict[str, Any]:
        """Close the client, flushing what it buffered."""
        self.client.close(wait_for_flush=True, timeout_seconds=cmd.get("timeout", 60))
        self.client, self.channels = None, {}
        return {}


def _error(exc: BaseException) -> dict[str, Any]:
    code = getattr(exc, "error_code", None)
    return {
        "ok": False,
        "error": f"{type(exc).__name__}: {exc}"[:2000],
        "code": getattr(code, "name", None),
        "http": getattr(exc, "http_status_code", None),
    }


def main() -> int:
    producer = Producer()
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd: Command = json.loads(line)
        started = time.monotonic()
        try:
            answer = {"ok": True, **producer.handle(cmd)}
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the test as data
            answer = _error(exc)
        answer["seconds"] = round(time.monotonic() - started, 3)
        print(json.dumps(answer), flush=True)
    producer._drop_client()
    return 0


if __name__ == "__main__":
    sys.exit(main())
