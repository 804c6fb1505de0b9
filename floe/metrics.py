"""Prometheus metrics: the families every Floe process exports, and the server the consumer and the
Spark job serve theirs on (the API serves its own at ``/metrics``). Off loopback, every page needs
a bearer (``MetricsAccess``).

Each process builds its families on a ``CollectorRegistry`` of its own and passes it down, never on
prometheus-client's global registry: the tests build many apps and consumers in one process, and
each must count only its own. Every label value is bounded by the catalog (pipe names, channel
names, route templates) or by the code (statuses, operations, sources); a file path or a request id
never becomes a label. Channel names, which clients choose, are capped per process
(``ChannelLabels``).

Which process moves which family (README "Metrics and health" lists them with their types):

* consumer (``ConsumerMetrics``): ``FileFlow`` (source ``notification``), ``SqsMetrics``,
  ``RedisErrors``;
* API (``ApiProcessMetrics``): ``FileFlow`` (source ``rest``), ``ApiMetrics``,
  ``StreamingAppends``, ``RedisErrors`` and ``QueueCollector`` (queue depth and age, and the job's
  heartbeat age, read from Redis at scrape time);
* Spark job driver (``PipelineMetrics``): ``LoadMetrics``, ``RedisErrors``.
"""

from __future__ import annotations

import hmac
import logging
import socket
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.gc_collector import GCCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from floe.catalog import Catalog, Pipe, now_ms
from floe.catalog.models import is_loopback_host
from floe.heartbeat import PIPELINE, newest_beat_ms
from floe.keys import REDIS_ERRORS, Keys, RedisClient

log = logging.getLogger("floe.metrics")

LATENCY_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
"""put→queryable seconds: a micro-batch every 250 ms and a load of a few seconds at best; a paused
pipe or a backlog at worst."""
BATCH_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Seconds of one micro-batch, from its rows to its last commit."""
FILES_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0)
"""Files (or channel appends) of one micro-batch: up to ``pipeline.max_files_per_batch``."""
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Seconds of one API request: insertFiles in milliseconds, a large query up to ``query.timeout_s``."""

MAX_CHANNEL_LABELS = 1000
"""Distinct channel names one process labels series with; later ones count under ``OTHER``."""
OTHER = "_other"
"""The channel label of channels past ``MAX_CHANNEL_LABELS``."""

LOAD_STATUSES = ("LOADED", "PARTIALLY_LOADED", "LOAD_FAILED")
"""The status label of ``floe_files_committed_total``: COPY_HISTORY's terminal statuses."""


def new_registry() -> CollectorRegistry:
    """A process's own registry, with prometheus-client's process and GC collectors on it (they
    register on the global registry only, which Floe does not serve)."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


class RedisErrors:
    """``floe_redis_errors_total{operation}``: Redis calls that failed (the store down or refusing),
    by the step of Floe that made them. Every process has one."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.counter = Counter(
            "floe_redis_errors",
            "Redis calls that failed (connection refused or lost, timeout, error reply), by Floe step",
            ["operation"],
            registry=registry,
        )

    def inc(self, operation: str) -> None:
        """Count one failed call of ``operation`` (a fixed name in the code, never data)."""
        self.counter.labels(operation).inc()


class FileFlow:
    """``floe_files_received_total`` and ``floe_files_enqueued_total`` per pipe and source: files
    routed to a pipe (an S3 notification, an insertFiles path matching the pipe), and those of them
    that dedup let into the pipe's queue (the rest the pipe had seen within 14 days)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.received = Counter(
            "floe_files_received",
            "Files routed to a pipe by an S3 notification (source=notification) or insertFiles (source=rest)",
            ["pipe", "source"],
            registry=registry,
        )
        self.enqueued = Counter(
            "floe_files_enqueued",
            "Files dedup added to a pipe's queue (received files the pipe had not seen)",
            ["pipe", "source"],
            registry=registry,
        )

    def record(self, pipe: str, source: str, flags: Sequence[bool]) -> None:
        """Count one dedup step's files: ``flags`` says, per file, whether it was enqueued."""
        if not flags:
            return
        self.received.labels(pipe, source).inc(len(flags))
        self.enqueued.labels(pipe, source).inc(sum(flags))


class SqsMetrics:
    """The consumer's SQS traffic."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.received = Counter(
            "floe_sqs_messages_received", "Messages ReceiveMessage returned", registry=registry
        )
        self.deleted = Counter(
            "floe_sqs_messages_deleted", "Messages deleted after their files were enqueued", registry=registry
        )
        self.released = Counter(
            "floe_sqs_messages_released",
            "Poison messages made visible again at once, so SQS moves them to the DLQ after "
            "consumer.max_receive_count deliveries",
            registry=registry,
        )
        self.errors = Counter(
            "floe_sqs_errors",
            "SQS calls that failed, by operation (receive, delete, release, extend, dlq_depth)",
            ["operation"],
            registry=registry,
        )
        self.dlq_depth = Gauge(
            "floe_sqs_dlq_messages",
            "ApproximateNumberOfMessages of the dead-letter queue, as last read (every 30 s)",
            registry=registry,
        )


class ChannelLabels:
    """The channel label of a streaming series: its name while this process has labelled fewer than
    ``limit`` channels, ``OTHER`` past that. Clients choose channel names and may open many;
    the series of one process stay bounded whatever they do."""

    def __init__(self, limit: int = MAX_CHANNEL_LABELS) -> None:
        self.limit = limit
        self._seen: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def __call__(self, pipe: str, channel: str) -> str:
        key = (pipe, channel)
        with self._lock:
            if key in self._seen:
                return channel
            if len(self._seen) < self.limit:
                self._seen.add(key)
                return channel
        return OTHER


class StreamingAppends:
    """``floe_streaming_rows_appended_total{pipe,channel}``: rows the API accepted into a channel
    (stored durably, not yet committed)."""

    def __init__(self, registry: CollectorRegistry, channels: ChannelLabels | None = None) -> None:
        self.channels = channels or ChannelLabels()
        self.rows = Counter(
            "floe_streaming_rows_appended",
            "Rows accepted by appendRows into a channel (durable, waiting for the Spark job)",
            ["pipe", "channel"],
            registry=registry,
        )

    def appended(self, pipe: str, channel: str, rows: int) -> None:
        """Count one accepted append."""
        self.rows.labels(pipe, self.channels(pipe, channel)).inc(rows)


@dataclass(frozen=True)
class CommittedFile:
    """What the metrics need of one file a commit made terminal."""

    status: str
    rows_loaded: int
    size: int | None
    latency_s: float
    """From the object's S3 event time (or the insertFiles call) to the commit."""


class LoadMetrics:
    """What the Spark job's driver counts from each micro-batch's results, after their commit."""

    def __init__(self, registry: CollectorRegistry, channels: ChannelLabels | None = None) -> None:
        self.channels = channels or ChannelLabels()
        self.files = Counter(
            "floe_files_committed",
            "Files whose load was committed, by terminal status (LOADED, PARTIALLY_LOADED, LOAD_FAILED)",
            ["pipe", "status"],
            registry=registry,
        )
        self.rows = Counter(
            "floe_rows_loaded", "Rows committed into the pipe's table from files", ["pipe"], registry=registry
        )
        self.bytes = Counter(
            "floe_bytes_loaded",
            "Stored bytes of the files loaded or partially loaded",
            ["pipe"],
            registry=registry,
        )
        self.latency = Histogram(
            "floe_load_latency_seconds",
            "put->queryable: from the object's S3 event time (or the insertFiles call) to the commit",
            ["pipe"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.batch_duration = Histogram(
            "floe_batch_duration_seconds",
            "Seconds of one micro-batch that had work, from reading its rows to its last commit",
            buckets=BATCH_BUCKETS,
            registry=registry,
        )
        self.batch_files = Histogram(
            "floe_batch_files",
            "Files and channel appends of one micro-batch that had work",
            buckets=FILES_BUCKETS,
            registry=registry,
        )
        self.stream_rows = Counter(
            "floe_streaming_rows_committed",
            "Rows of a channel's appends committed into the table",
            ["pipe", "channel"],
            registry=registry,
        )
        self.stream_lag = Gauge(
            "floe_streaming_commit_lag_seconds",
            "Mean seconds from append to commit of the channel's appends in its last committed batch",
            ["pipe", "channel"],
            registry=registry,
        )

    def committed(self, pipe: str, files: Sequence[CommittedFile]) -> None:
        """Count the files of one pipe's commit (only a commit that happened: not a replay)."""
        rows = size = 0
        by_status: dict[str, int] = {}
        for f in files:
            by_status[f.status] = by_status.get(f.status, 0) + 1
            self.latency.labels(pipe).observe(max(0.0, f.latency_s))
            if f.status != "LOAD_FAILED":
                rows += f.rows_loaded
                size += f.size or 0
        for status, n in by_status.items():
            self.files.labels(pipe, status).inc(n)
        if rows:
            self.rows.labels(pipe).inc(rows)
        if size:
            self.bytes.labels(pipe).inc(size)

    def settled(self, pipe: str, channel: str, rows: int, lag_s: float) -> None:
        """Count one channel's committed appends."""
        label = self.channels(pipe, channel)
        self.stream_rows.labels(pipe, label).inc(rows)
        self.stream_lag.labels(pipe, label).set(max(0.0, lag_s))

    def batch(self, seconds: float, files: int) -> None:
        """Time one micro-batch that had work."""
        self.batch_duration.observe(seconds)
        self.batch_files.observe(files)


class ApiMetrics:
    """``floe_api_requests_total`` and ``floe_api_latency_seconds``, per route template, method and
    status: every REST, SQL, streaming and stage request, refusals by the gate included."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "floe_api_requests",
            "API requests by route template, method and status",
            ["route", "method", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "floe_api_latency_seconds",
            "API request seconds (to the end of the response) by route template, method and status",
            ["route", "method", "status"],
            buckets=REQUEST_BUCKETS,
            registry=registry,
        )

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        """Count and time one request."""
        code = str(status)
        self.requests.labels(route, method, code).inc()
        self.latency.labels(route, method, code).observe(seconds)


MAX_QUEUE_PIPES = 10_000
"""Pipes one scrape reads the queue of (the first by name): a safety bound, far above a catalog's
usual size; the scrape costs one pipelined round trip of two O(1) commands per pipe."""


class QueueCollector(Collector):
    """Gauges read from Redis at scrape time, in one pipelined round trip: per pipe the entries
    waiting in its queue (files; a streaming pipe's channel appends) and the age of the oldest,
    and the age of the Spark job's newest heartbeat.

    It runs in the API: the API stays up when the job stops, which is when a queue grows. A Redis
    failure leaves the gauges out of that scrape (Prometheus then shows a gap, not a stale value)
    and counts in ``floe_redis_errors_total{operation="queue_scrape"}``.
    """

    def __init__(
        self,
        catalog: Catalog,
        client: RedisClient,
        keys: Keys,
        errors: RedisErrors,
        max_pipes: int = MAX_QUEUE_PIPES,
    ) -> None:
        self.catalog = catalog
        self.client = client
        self.keys = keys
        self.errors = errors
        self.max_pipes = max_pipes

    def describe(self) -> list[Metric]:
        return list(self.families())

    @staticmethod
    def families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        """The collector's families, empty (its ``describe``, and what the dashboard test lists)."""
        return (
            GaugeMetricFamily(
                "floe_queue_depth",
                "Entries waiting in the pipe's queue: files, or a streaming pipe's channel appends",
                labels=["pipe"],
            ),
            GaugeMetricFamily(
                "floe_queue_oldest_age_seconds",
                "Seconds since the oldest waiting entry of the pipe's queue was queued (0 when empty)",
                labels=["pipe"],
            ),
            GaugeMetricFamily(
                "floe_pipeline_heartbeat_age_seconds",
                "Seconds since the Spark job's newest heartbeat (absent when no job ever beat)",
            ),
        )

    def collect(self) -> list[Metric]:
        depth, age, heartbeat = self.families()
        try:
            pipes = sorted(self.catalog.all(Pipe).values(), key=lambda p: p.name)[: self.max_pipes]
            with self.client.pipeline(transaction=False) as batch:
                for pipe in pipes:
                    stream = (
                        self.keys.rows(pipe.id) if pipe.source == "streaming" else self.keys.queue(pipe.id)
                    )
                    batch.xlen(stream)
                    batch.xrange(stream, count=1)
                batch.hgetall(self.keys.heartbeat(PIPELINE))
                answers = batch.execute()
        except REDIS_ERRORS:
            self.errors.inc("queue_scrape")
            return []
        now = now_ms()
        for i, pipe in enumerate(pipes):
            n, first = int(answers[2 * i]), answers[2 * i + 1]
            depth.add_metric([pipe.name], n)
            age.add_metric(
                [pipe.name], max(0, now - stream_id_ms(first[0][0])) / 1000 if n and first else 0.0
            )
        beat = newest_beat_ms(answers[-1])
        if beat is not None:
            heartbeat.add_metric([], max(0, now - beat) / 1000)
        return [depth, age, heartbeat]


def stream_id_ms(stream_id: bytes | str) -> int:
    """The time (ms) a Redis stream entry was added, from its id ``<ms>-<seq>``."""
    text = stream_id.decode() if isinstance(stream_id, bytes) else stream_id
    return int(text.split("-", 1)[0])


# ------------------------------------------------------------------------------------------------
# What each process exports


@dataclass
class ConsumerMetrics:
    """A consumer process's families."""

    registry: CollectorRegistry
    files: FileFlow
    sqs: SqsMetrics
    redis_errors: RedisErrors

    @classmethod
    def create(cls) -> ConsumerMetrics:
        registry = new_registry()
        return cls(registry, FileFlow(registry), SqsMetrics(registry), RedisErrors(registry))


@dataclass
class PipelineMetrics:
    """The Spark job driver's families."""

    registry: CollectorRegistry
    loads: LoadMetrics
    redis_errors: RedisErrors

    @classmethod
    def create(cls) -> PipelineMetrics:
        registry = new_registry()
        return cls(registry, LoadMetrics(registry), RedisErrors(registry))


@dataclass
class ApiProcessMetrics:
    """The API's families (``services.api.create_app`` adds the ``QueueCollector``, which needs
    the app's catalog)."""

    registry: CollectorRegistry
    requests: ApiMetrics
    files: FileFlow
    appends: StreamingAppends
    redis_errors: RedisErrors

    @classmethod
    def create(cls) -> ApiProcessMetrics:
        registry = new_registry()
        return cls(
            registry,
            ApiMetrics(registry),
            FileFlow(registry),
            StreamingAppends(registry),
            RedisErrors(registry),
        )


# ------------------------------------------------------------------------------------------------
# Serving


def metrics_url(host: str, port: int) -> str:
    """Where a metrics server on ``host``:``port`` answers."""
    # A wildcard address is where the server listens, not where a client reaches it.
    shown = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}/metrics"


TOKEN_SETTING = "FLOE_API__METRICS_TOKEN"
"""The scrape token's setting (``api.metrics_token``), as refusals and warnings name it."""


@dataclass(frozen=True)
class MetricsAccess:
    """Who may read a process's metrics page (decision 113).

    Bound to loopback, a page answers whoever reaches it: only this machine can. Bound to any other
    address, its labels (every pipe's name, and channels') go only to a bearer of the scrape token
    (``api.metrics_token``), compared in constant time, or, on the API, to a user whose role holds
    MONITOR on the account (``services.api`` checks that through ``services.access.authorize``).
    """

    host: str
    """Where the process binds (``api.host``: every process binds its metrics there)."""
    token: str | None
    """The scrape token; None when none is set (then off loopback only a MONITOR user reads)."""

    @property
    def open(self) -> bool:
        return is_loopback_host(self.host)

    def scraper(self, authorization: str | None) -> bool:
        """Whether an Authorization header is 'Bearer <the scrape token>'."""
        if self.token is None or not authorization:
            return False
        scheme, _, value = authorization.strip().partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), self.token.encode())

    def refusal(self, users: bool) -> str:
        """What a refused scrape is told: what to send, and the setting to set. ``users``: the
        page also admits a MONITOR user's JWT (the API's)."""
        whom = "the scrape token" + (
            ", or a key-pair JWT of a user whose role holds MONITOR on the account" if users else ""
        )
        where = f"{self.host or 'every interface'} (api.host), not loopback"
        if self.token is None:
            fix = (
                f"{TOKEN_SETTING} (or {TOKEN_SETTING}_FILE) is not set: set it for every Floe process "
                "and give the scraper the same token"
            )
        else:
            fix = f"the token is the one {TOKEN_SETTING} (or {TOKEN_SETTING}_FILE) sets"
        return (
            f"This metrics page needs 'Authorization: Bearer <token>' with {whom}: it binds to "
            f"{where}; {fix}."
        )

    def warn(self, component: str) -> None:
        """Log, at start, that no scraper will be answered: bound off loopback without a token."""
        if not self.open and self.token is None:
            log.warning(
                "%s metrics bind to %s, not loopback, and %s is not set: every scrape is refused "
                "(401)%s; set %s (at least 32 characters) for every Floe process and the scraper",
                component,
                self.host or "every interface",
                TOKEN_SETTING,
                " but a MONITOR user's" if component == "api" else "",
                TOKEN_SETTING,
            )


def guarded(app: WSGIApplication, access: MetricsAccess) -> WSGIApplication:
    """``app`` (prometheus-client's page) behind ``access``: a refused request gets 401 and what to
    send, and the page is never rendered for it."""

    def answer(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if access.open or access.scraper(environ.get("HTTP_AUTHORIZATION")):
            return app(environ, start_response)
        body = access.refusal(users=False).encode()
        start_response(
            "401 Unauthorized",
            [
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", str(len(body))),
                ("WWW-Authenticate", 'Bearer realm="floe metrics"'),
            ],
        )
        return [body]

    return answer


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr: the processes log JSON lines there (prometheus-client's own
    server is quiet too)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _start_server(app: WSGIApplication, host: str, port: int) -> WSGIServer:
    """prometheus-client's ``start_http_server``, serving ``app`` (it takes no WSGI wrapper): a
    threading server of the address family ``host`` resolves to, in a daemon thread."""
    family, _, _, _, address = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]

    class Server(ThreadingWSGIServer):
        address_family = family

    server = make_server(str(address[0]), port, app, Server, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


def serve(
    registry: CollectorRegistry,
    host: str,
    port: int,
    component: str,
    setting: str,
    token: str | None = None,
) -> WSGIServer | None:
    """Serve ``registry`` on ``host``:``port`` from a daemon thread (prometheus-client's page,
    which answers on any path; ``/metrics`` by convention), and log where. Off loopback, only to
    ``token`` (``MetricsAccess``). None when ``port`` is 0 (off) or cannot be bound: a process
    that cannot serve its metrics still loads (a second consumer on a host where it was not given
    a port of its own, say), and its log says why and which setting (``setting``, an environment
    variable) gives it one."""
    if port == 0:
        log.info("%s metrics are off (%s=0)", component, setting)
        return None
    access = MetricsAccess(host, token)
    access.warn(component)
    try:
        server = _start_server(guarded(make_wsgi_app(registry), access), host, port)
    except OSError as exc:
        log.error(
            "%s metrics not served: cannot listen on %s:%d (%s); give each %s process a port of its own "
            "with %s, or 0 to serve none",
            component,
            host,
            port,
            exc.strerror or exc,
            component,
            setting,
        )
        return None
    log.info("%s metrics at %s", component, metrics_url(host, port))
    return server
