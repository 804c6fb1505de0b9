"""The trivial remote service of the external-function benchmark (``bench/external.py``).

``POST /echo`` answers each row's one argument unchanged, through ``floe.external.remote``'s
``parse_request`` and ``build_response``. ``GET /stats`` tells what it received since the last
``POST /stats/reset``: requests, distinct batch ids (a retry repeats its batch's id), rows, and the
most requests it held at once. It runs in a process of its own (``python -m uvicorn
bench.echo_service:app``), and imports nothing of the benchmark, so it starts in a moment.

The answer is built in a worker thread, as ``floe.external.remote.endpoint`` does: the event loop
then takes the next request while one is being answered, so the in-flight count shows how many
requests the caller had outstanding at once. Built inline, every request would run start to end
without yielding and the count would stay at 1 whatever the caller did.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from floe.external.remote import RemoteRequest, RemoteRequestError, build_response, parse_request


@dataclass
class Counters:
    """What the service received since the last reset. Touched only on the event loop's thread,
    so it needs no lock."""

    requests: int = 0
    rows: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    batch_ids: set[str] = field(default_factory=set)

    def begin(self) -> None:
        """A request arrived."""
        self.requests += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def end(self) -> None:
        """A request was answered (or refused)."""
        self.in_flight -= 1

    def reset(self) -> None:
        """Start counting afresh (requests still in flight stay counted as in flight)."""
        self.requests = self.rows = 0
        self.max_in_flight = self.in_flight
        self.batch_ids = set()

    def snapshot(self) -> dict[str, int]:
        """The counters as ``GET /stats`` answers them."""
        return {
            "requests": self.requests,
            "batches": len(self.batch_ids),
            "rows": self.rows,
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
        }


def echo_body(request: RemoteRequest) -> bytes:
    """The answer to one batch: each row's first argument, unchanged."""
    return build_response(request, [args[0] if args else None for args in request.args])


def create_app() -> Starlette:
    """The echo service with fresh counters (``app.state.counters``)."""
    counters = Counters()

    async def echo(request: Request) -> Response:
        counters.begin()
        try:
            body = await request.body()
            try:
                parsed = parse_request(body, request.headers)
            except RemoteRequestError as exc:
                return JSONResponse({"error": exc.message}, status_code=exc.status)
            counters.rows += len(parsed.rows)
            counters.batch_ids.add(parsed.batch_id)
            payload = await run_in_threadpool(echo_body, parsed)
            return Response(payload, media_type="application/json")
        finally:
            counters.end()

    async def stats(request: Request) -> JSONResponse:
        return JSONResponse(counters.snapshot())

    async def reset(request: Request) -> JSONResponse:
        counters.reset()
        return JSONResponse(counters.snapshot())

    app = Starlette(
        routes=[
            Route("/echo", echo, methods=["POST"]),
            Route("/stats", stats, methods=["GET"]),
            Route("/stats/reset", reset, methods=["POST"]),
        ]
    )
    app.state.counters = counters
    return app


app = create_app()
