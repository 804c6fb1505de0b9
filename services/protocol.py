"""uvicorn's httptools protocol with bounds that llhttp and httptools lack.

Neither bounds a request head: httptools grows one header value, and uvicorn the URL and the
header list, for as long as the client sends. uvicorn has no timeout for a head either, so
idle or dribbling connections would hold ``limit_concurrency`` slots for ever. Here a head
over ``max_head`` bytes gets 431, a head (or a first request) not complete ``timeout_s`` after
its first byte (or after the connection opened) gets 408, and a body left unread behind an
early answer (401, 413) may take at most ``timeout_s`` to drain; each then closes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class BoundedHttpTools(HttpToolsProtocol):
    """httptools with a bounded request head and bounded waits for a head or a drain."""

    max_head = 32 * 1024
    """Largest request line plus headers, in bytes; ``limited`` sets it per server."""
    timeout_s = 10.0
    """Longest wait for a complete head, or for a body drain after an early answer."""
    _head_left: int | None = None
    _heads = 0
    _timer: asyncio.TimerHandle | None = None

    def _arm(self, callback: Any) -> None:
        self._disarm()
        self._timer = self.loop.call_later(self.timeout_s, callback)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _refuse(self, status: int, reason: str) -> None:
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:
            text = reason.encode()
            self.transport.write(
                b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (status, text, len(text), text)
            )
        self.transport.close()

    def _head_timed_out(self) -> None:
        self._timer = None
        if self.cycle is not None and not self.cycle.response_complete:
            self._arm(self._head_timed_out)  # a pipelined head waits for the answer before it
            return
        self._refuse(408, "Request Timeout")

    def _drain_timed_out(self) -> None:
        self._timer = None
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_left = self.max_head
        self._arm(self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        left = self._head_left
        if left is not None:
            if self._timer is None:
                self._arm(self._head_timed_out)
            if len(data) > left:
                heads = self._heads
                super().data_received(data[:left])
                if self._heads == heads:
                    self._refuse(431, "Request Header Fields Too Large")
                    return
                data = data[left:]
                if self.transport.is_closing():
                    return
            else:
                self._head_left = left - len(data)
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._head_left = None
        self._heads += 1
        self._disarm()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._head_left = self.max_head
        self._disarm()
        drained = self.cycle is not None and self.cycle.response_complete
        super().on_message_complete()
        if drained:
            self._arm(self._head_timed_out)  # uvicorn's keep-alive timer was spent on the drain

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._head_left is None and not self.transport.is_closing():
            self._arm(self._drain_timed_out)  # answered before its body arrived: bound the drain

    @classmethod
    def limited(cls, max_head: int, timeout_s: float) -> type[BoundedHttpTools]:
        """A subclass with these bounds: uvicorn takes a protocol class, not an instance."""
        return type(cls.__name__, (cls,), {"max_head": max_head, "timeout_s": timeout_s})
