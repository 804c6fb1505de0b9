"""Raw HTTP attacks on the API: bodies far larger than any request needs, streamed from a
generator (never built in memory), and the API process's memory read from /proc."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

MB = 1024 * 1024


@dataclass
class Flood:
    """A request body of ``total`` zero bytes, produced chunk by chunk as the client sends it."""

    total: int
    chunk: int = MB
    sent: int = 0

    def __iter__(self) -> Iterator[bytes]:
        block = b"\0" * self.chunk
        while self.sent < self.total:
            piece = block[: min(self.chunk, self.total - self.sent)]
            self.sent += len(piece)
            yield piece


def post_flood(
    url: str, flood: Flood, headers: dict[str, str], declare_length: bool, timeout: float = 120.0
) -> httpx.Response:
    """POST the flood as application/json: with its Content-Length declared, or chunked."""
    sent = {**headers, "Content-Type": "application/json"}
    if declare_length:
        sent["Content-Length"] = str(flood.total)
    return httpx.post(url, content=iter(flood), headers=sent, timeout=timeout)


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process, in bytes, from /proc/<pid>/status."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            out[name] = int(value.split()[0]) * 1024
    return out
