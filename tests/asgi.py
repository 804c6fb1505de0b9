"""A synchronous in-process client of an ASGI app, in place of starlette's TestClient.

starlette.testclient warns that it is deprecated with httpx (its replacement, httpx2, is not
installable here), and the suite turns warnings into errors. This client keeps what the tests
relied on: one event loop for all of a client's requests, run in a blocking portal thread, so the
app's loop-bound state (locks, limiters, caches) lives as long as the client does.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterable, Mapping
from types import TracebackType
from typing import Any

import anyio.from_thread
import httpx
from starlette.types import ASGIApp

CLIENT_ADDRESS = ("127.0.0.1", 50000)


class AppClient:
    """A blocking HTTP client whose requests are served by an ASGI app in this process."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        base_url: str = "http://testserver",
        client: tuple[str, int] = CLIENT_ADDRESS,
        follow_redirects: bool = True,
    ) -> None:
        self.app = app
        self._stack = contextlib.ExitStack()
        self._portal = self._stack.enter_context(anyio.from_thread.start_blocking_portal())
        try:
            transport = httpx.ASGITransport(app=app, client=client)
            # TestClient followed redirects; keep that so a test sees the same answers.
            self._client = httpx.AsyncClient(
                transport=transport, base_url=base_url, follow_redirects=follow_redirects
            )
        except BaseException:
            self._stack.close()  # the portal thread would otherwise keep the interpreter alive
            raise
        # Callbacks run last-in first-out: the client closes on the loop before the portal stops.
        self._stack.callback(self._portal.call, self._client.aclose)

    def request(
        self,
        method: str,
        url: httpx.URL | str,
        *,
        content: str | bytes | AsyncIterable[bytes] | None = None,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """Send one request through the app and return its complete response."""
        call = functools.partial(
            self._client.request,
            method,
            url,
            content=content,
            json=json,
            params=params,
            headers=headers,
        )
        return self._portal.call(call)

    def get(self, url: httpx.URL | str, **options: Any) -> httpx.Response:
        """GET the URL; ``options`` as ``request`` takes them."""
        return self.request("GET", url, **options)

    def post(self, url: httpx.URL | str, **options: Any) -> httpx.Response:
        """POST to the URL; ``options`` as ``request`` takes them."""
        return self.request("POST", url, **options)

    def put(self, url: httpx.URL | str, **options: Any) -> httpx.Response:
        """PUT to the URL; ``options`` as ``request`` takes them."""
        return self.request("PUT", url, **options)

    def delete(self, url: httpx.URL | str, **options: Any) -> httpx.Response:
        """DELETE the URL; ``options`` as ``request`` takes them."""
        return self.request("DELETE", url, **options)

    def close(self) -> None:
        """Close the HTTP client and stop the portal thread; closing twice does nothing."""
        self._stack.close()

    def __enter__(self) -> AppClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
