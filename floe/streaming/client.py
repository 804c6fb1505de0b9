"""Floe's Python Snowpipe Streaming client, with the API of the ``snowpipe-streaming`` SDK
(``StreamingIngestClient`` / ``StreamingIngestChannel``), over Floe's v2 REST API.

    with StreamingIngestClient("loader", "DB", "PUBLIC", "EVENTS_PIPE") as client:
        channel, status = client.open_channel("partition-0", on_error="SKIP_BATCH")
        channel.append_rows(rows, end_offset_token="41")
        channel.wait_for_commit(lambda token: token == "41", timeout_seconds=60)

Properties (a dict, or ``profile_json``: a JSON file with the same keys; the dict wins):
``url``, ``account``, ``user``, ``private_key`` (PEM text) or ``private_key_file``, ``role``,
``ca_file``, ``max_client_lag`` (ms), ``max_buffer_bytes``, ``compression`` (zstd, gzip, none),
``commit_poll_interval_ms``, ``flush_threads``, ``max_retries``, ``request_timeout_ms``. Connection
properties left out default to Floe's own settings (``FLOE_*``), as ``floe sql`` does: the API's URL,
the admin user and its key file, and the API's CA.
"""

from __future__ import annotations

import json
import logging
import ssl
import time
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from cryptography.hazmat.primitives.asymmetric import rsa

from floe.errors import FloeError
from floe.keypair import load_private_key, sign_token
from floe.settings import Settings
from floe.streaming import protocol as wire
from floe.streaming.channel import (
    ON_ERROR_OPTIONS,
    ChannelContext,
    Flusher,
    StreamingIngestChannel,
    drop_remote,
    fetch_statuses,
)
from floe.streaming.protocol import ChannelStatus
from floe.streaming.transport import (
    ChannelClosedError,
    Codec,
    HttpxTransport,
    Session,
    StreamingConfigError,
    StreamingError,
    StreamingRequestError,
    Transport,
    scope_of,
)
from floe.tls import TlsError, api_base_url, client_ssl_context

log = logging.getLogger("floe.streaming.client")

DEFAULT_MAX_BUFFER_BYTES = 64 * 1024 * 1024
"""The client's memory bound: appends block while this many bytes wait to be sent."""
DEFAULT_COMMIT_POLL_INTERVAL_MS = 200
"""How often wait_for_commit polls the channel status."""
DEFAULT_FLUSH_THREADS = 4
"""Channels sent at once (one request at a time per channel)."""
DEFAULT_MAX_RETRIES = 8
"""Retries of a retryable answer (429, 5xx, a lost connection) before a call fails."""
DEFAULT_REQUEST_TIMEOUT_MS = 60_000
MAX_CLIENT_LAG_RANGE_MS = (1, 600_000)
JWT_LIFETIME_S = 3540
"""The key-pair JWT only lives for the token exchange; under Snowflake's one-hour limit."""
DEFAULT_PIPE_SUFFIX = "-STREAMING"
"""``from_table`` uses the table's default pipe ``<TABLE>-STREAMING``."""
CLOSE_JOIN_TIMEOUT_S = 2.0
"""How long close() waits for a sender thread still inside a request (they are daemons anyway)."""

_KNOWN_PROPERTIES = frozenset(
    {
        "url",
        "account",
        "user",
        "private_key",
        "private_key_file",
        "role",
        "ca_file",
        "max_client_lag",
        "max_buffer_bytes",
        "compression",
        "commit_poll_interval_ms",
        "flush_threads",
        "max_retries",
        "request_timeout_ms",
    }
)


# ------------------------------------------------------------------------------------------------
# Configuration


@dataclass(frozen=True)
class ClientConfig:
    """A client's properties, checked, with the defaults filled in."""

    url: str
    account: str
    user: str
    private_key: rsa.RSAPrivateKey
    ssl_context: ssl.SSLContext | None
    role: str | None
    max_client_lag_ms: int
    max_buffer_bytes: int
    compression: str
    commit_poll_interval_ms: int
    flush_threads: int
    max_retries: int
    request_timeout_ms: int

    @classmethod
    def load(
        cls,
        profile_json: str | Path | None,
        properties: Mapping[str, Any] | None,
        *,
        need_tls: bool = True,
        floe: Settings | None = None,
    ) -> ClientConfig:
        """From a profile file and a dict (the dict wins). ``need_tls``: build the SSL context (not
        needed with an injected transport). ``floe``: the settings whose API, admin user and key
        fill in what the properties leave out (default: ``Settings()`` from the environment)."""
        props = _merged_properties(profile_json, properties)
        settings: list[Settings] = [floe] if floe is not None else []

        def floe_settings() -> Settings:
            # Only when a connection property is left out: an explicit configuration never depends on
            # the FLOE_* environment.
            if not settings:
                settings.append(Settings())
            return settings[0]

        url = _text(props, "url") or api_base_url(floe_settings())
        if not url.startswith(("http://", "https://")):
            raise StreamingConfigError(f"the url property must start with http:// or https://, not {url!r}")
        account = _text(props, "account") or floe_settings().account
        user = (_text(props, "user") or floe_settings().auth.admin_user).upper()
        return cls(
            url=url.rstrip("/"),
            account=account,
            user=user,
            private_key=_private_key(props, floe_settings),
            ssl_context=_ssl_context(props, url, floe_settings) if need_tls else None,
            # Kept for profiles written for the SDK; not sent: Floe's server acts with the user's
            # default role, so naming one here would suggest a control that does not exist yet.
            role=_text(props, "role"),
            max_client_lag_ms=_int(
                props, "max_client_lag", wire.DEFAULT_MAX_CLIENT_LAG_MS, *MAX_CLIENT_LAG_RANGE_MS
            ),
            max_buffer_bytes=_int(props, "max_buffer_bytes", DEFAULT_MAX_BUFFER_BYTES, 1, 2**50),
            compression=(_text(props, "compression") or "zstd").lower(),
            commit_poll_interval_ms=_int(
                props, "commit_poll_interval_ms", DEFAULT_COMMIT_POLL_INTERVAL_MS, 1, 600_000
            ),
            flush_threads=_int(props, "flush_threads", DEFAULT_FLUSH_THREADS, 1, 64),
            max_retries=_int(props, "max_retries", DEFAULT_MAX_RETRIES, 0, 100),
            request_timeout_ms=_int(props, "request_timeout_ms", DEFAULT_REQUEST_TIMEOUT_MS, 1, 3_600_000),
        )


def _merged_properties(
    profile_json: str | Path | None, properties: Mapping[str, Any] | None
) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    if profile_json is not None:
        try:
            doc = json.loads(Path(profile_json).read_text())
        except OSError as exc:
            raise StreamingConfigError(f"cannot read the profile {profile_json}: {exc.strerror}") from None
        except ValueError as exc:
            raise StreamingConfigError(f"the profile {profile_json} is not valid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise StreamingConfigError(f"the profile {profile_json} must hold a JSON object")
        merged.update({str(k).lower(): v for k, v in doc.items()})
    merged.update({str(k).lower(): v for k, v in (properties or {}).items()})
    unknown = sorted(set(merged) - _KNOWN_PROPERTIES)
    if unknown:
        # Profiles written for the SDK carry keys Floe has no use for (host, scheme, ...): not fatal.
        log.warning("ignoring unknown streaming client properties: %s", ", ".join(unknown))
    return merged


def _text(props: Mapping[str, Any], name: str) -> str | None:
    value = props.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise StreamingConfigError(f"the {name} property must be a string, not {type(value).__name__}")
    return value


def _int(props: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = props.get(name, default)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise StreamingConfigError(
            f"the {name} property must be an integer from {low} to {high}, not {value!r}"
        )
    return value


def _private_key(props: Mapping[str, Any], floe_settings: Callable[[], Settings]) -> rsa.RSAPrivateKey:
    pem = _text(props, "private_key")
    path = _text(props, "private_key_file")
    if pem is not None and path is not None:
        raise StreamingConfigError("give either the private_key or the private_key_file property, not both")
    where = "the private_key property"
    if pem is None:
        path = path or floe_settings().auth.admin_key_file
        where = path
        try:
            pem = Path(path).read_text()
        except OSError as exc:
            shown = path if Path(path).is_absolute() else f"{path} (relative to {Path.cwd()})"
            raise StreamingConfigError(
                f"cannot read the private key {shown}: {exc.strerror}. Set the private_key_file property, "
                "or run from the Floe checkout, whose API creates the admin key on its first start."
            ) from None
    elif not pem.lstrip().startswith("-----BEGIN"):
        # SDK profiles often hold the key's base64 body without the PEM armour.
        pem = f"-----BEGIN PRIVATE KEY-----\n{pem.strip()}\n-----END PRIVATE KEY-----\n"
    try:
        return load_private_key(pem)
    except FloeError as exc:
        raise StreamingConfigError(f"cannot use the private key from {where}: {exc.message}") from None


def _ssl_context(
    props: Mapping[str, Any], url: str, floe_settings: Callable[[], Settings]
) -> ssl.SSLContext | None:
    ca_file = _text(props, "ca_file")
    if ca_file is not None:
        try:
            return ssl.create_default_context(cafile=ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise StreamingConfigError(f"cannot read the CA certificate {ca_file}: {exc}") from None
    if not url.startswith("https://"):
        return None
    try:
        return client_ssl_context(floe_settings())
    except TlsError as exc:
        raise StreamingConfigError(exc.message) from None


# ------------------------------------------------------------------------------------------------
# The client


def _abandon(flusher: Flusher, session: Session, transport: Transport, name: str) -> None:
    """A client that was never closed is being collected, or the interpreter exits: stop at once.

    Nothing here waits on the network, so neither garbage collection nor exit can hang on it.
    """
    session.aborted.set()
    dropped = flusher.shutdown()
    transport.close()
    if dropped:
        log.warning("streaming client %s was not closed: %d buffered rows were dropped", name, dropped)


class StreamingIngestClient:
    """A Snowpipe Streaming client for one pipe, with the ``snowpipe-streaming`` SDK's API."""

    def __init__(
        self,
        client_name: str,
        db_name: str,
        schema_name: str,
        pipe_name: str,
        profile_json: str | Path | None = None,
        properties: Mapping[str, Any] | None = None,
        *,
        transport: Transport | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], object] | None = None,
        settings: Settings | None = None,
    ) -> None:
        """Connect: exchange the key-pair JWT for a scoped token and ask the hostname.

        ``transport``, ``clock`` (monotonic seconds) and ``sleep`` are seams for tests. ``settings``:
        a Floe deployment's settings, which fill in the url, account, user, key and CA the
        properties leave out (default: ``Settings()``, from the FLOE_* environment).
        """
        self.client_name = client_name
        self.db_name = db_name
        self.schema_name = schema_name
        self.pipe_name = pipe_name
        config = ClientConfig.load(profile_json, properties, need_tls=transport is None, floe=settings)
        self.config = config
        clock = clock or time.monotonic
        if transport is None:
            transport = HttpxTransport(config.url, config.ssl_context, config.request_timeout_ms / 1000)
        self._transport = transport
        key, account, user = config.private_key, config.account, config.user
        self._session = Session(
            transport,
            lambda: sign_token(account, user, key, JWT_LIFETIME_S),
            scope_of(config.url),
            clock=clock,
            sleep=sleep,
            max_retries=config.max_retries,
            pipe=f"{db_name}.{schema_name}.{pipe_name}",
        )
        self._flusher = Flusher(
            f"floe-streaming-{client_name}",
            clock=clock,
            lag_s=config.max_client_lag_ms / 1000,
            max_buffer_bytes=config.max_buffer_bytes,
            threads=config.flush_threads,
        )
        self._ctx = ChannelContext(
            session=self._session,
            flusher=self._flusher,
            codec=Codec(config.compression),
            db_name=db_name,
            schema_name=schema_name,
            pipe_name=pipe_name,
            clock=clock,
            sleep=sleep or self._session.aborted.wait,
            poll_interval_s=config.commit_poll_interval_ms / 1000,
        )
        try:
            # Plain text, a bare host (the SDK's form). Informational: Floe serves the channel
            # routes itself, so the configured URL stays in use.
            self.hostname = self._session.call_text("GET", wire.HOSTNAME_PATH)
        except BaseException:
            transport.close()
            raise
        self._closed = False
        self._flusher.start()
        self._finalizer = weakref.finalize(
            self, _abandon, self._flusher, self._session, transport, client_name
        )

    @classmethod
    def from_table(
        cls,
        client_name: str,
        db_name: str,
        schema_name: str,
        table_name: str,
        profile_json: str | Path | None = None,
        properties: Mapping[str, Any] | None = None,
        *,
        transport: Transport | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], object] | None = None,
    ) -> StreamingIngestClient:
        """A client for the table's default pipe ``<TABLE>-STREAMING``."""
        return cls(
            client_name,
            db_name,
            schema_name,
            f"{table_name.upper()}{DEFAULT_PIPE_SUFFIX}",
            profile_json,
            properties,
            transport=transport,
            clock=clock,
            sleep=sleep,
        )

    # ------------------------------------------------------------------------------- properties

    @property
    def is_closed(self) -> bool:
        """Whether close() was called."""
        return self._closed

    @property
    def fully_qualified_pipe_name(self) -> str:
        """``DB.SCHEMA.PIPE``."""
        return self._ctx.fully_qualified_pipe_name

    @property
    def buffered_bytes(self) -> int:
        """Bytes appended on this client's channels and not yet accepted by the server."""
        with self._flusher.cond:
            return self._flusher.buffered_bytes

    def _check_open(self) -> None:
        if self._closed:
            raise ChannelClosedError("the client was closed", pipe=self.fully_qualified_pipe_name)

    # --------------------------------------------------------------------------------- channels

    def open_channel(
        self,
        channel_name: str,
        offset_token: str | None = None,
        on_error: str = "CONTINUE",
        fail_on_uncommitted_rows: bool = False,
    ) -> tuple[StreamingIngestChannel, ChannelStatus]:
        """Open (create, or reopen and so fence the previous writer) a channel; it and its status.

        ``offset_token`` sets the channel's committed token when given. Reopening discards the rows
        the server has not committed (or refuses, with ``fail_on_uncommitted_rows``).
        """
        self._check_open()
        mode = on_error.upper() if isinstance(on_error, str) else on_error
        if mode not in ON_ERROR_OPTIONS:
            raise StreamingConfigError(
                f"on_error must be one of {', '.join(ON_ERROR_OPTIONS)}, not {on_error!r}"
            )
        body: dict[str, Any] = {wire.FAIL_ON_UNCOMMITTED_ROWS: bool(fail_on_uncommitted_rows)}
        if offset_token is not None:
            body[wire.OFFSET_TOKEN] = offset_token
        doc = self._session.call(
            "PUT",
            wire.channel_path(self.db_name, self.schema_name, self.pipe_name, channel_name),
            params={wire.REQUEST_ID: str(uuid.uuid4())},
            json=body,
            channel=channel_name,
        )
        token, raw_status, columns = (
            doc.get(wire.NEXT_CONTINUATION_TOKEN),
            doc.get(wire.CHANNEL_STATUS),
            doc.get(wire.TABLE_COLUMNS, []),
        )
        if (
            not isinstance(token, str)
            or not token
            or not isinstance(raw_status, dict)
            or not isinstance(columns, list)
        ):
            raise StreamingRequestError(
                f"the open answer lacks {wire.NEXT_CONTINUATION_TOKEN}, {wire.CHANNEL_STATUS} or "
                f"{wire.TABLE_COLUMNS}: {doc!r:.300}",
                channel=channel_name,
            )
        try:
            status = ChannelStatus.from_json(raw_status)
        except TypeError as exc:
            raise StreamingRequestError(f"the open answer's channel status is malformed: {exc}") from None
        channel = StreamingIngestChannel(
            self._ctx,
            channel_name,
            token,
            on_error=mode,
            table_columns=[c for c in columns if isinstance(c, dict)],
        )
        with self._flusher.cond:
            if self._flusher.stopping:
                raise ChannelClosedError("the client was closed", pipe=self.fully_qualified_pipe_name)
            old = self._flusher.open.get(channel_name)
            if old is not None:
                # The server fenced the old object's token; its buffered rows could only fail now.
                old._invalidate_locked(
                    StreamingError(
                        "it was reopened by open_channel in this client; use the channel object that "
                        "call returned",
                        code=wire.Code.STALE_CONTINUATION_TOKEN_SEQUENCER,
                    )
                )
                old._close_locked("the channel was reopened by open_channel in this client")
            self._flusher.open[channel_name] = channel
        return channel, status

    def drop_channel(self, channel_name: str) -> None:
        """Drop the channel on the server; an open channel object of it is closed, its rows dropped."""
        self._check_open()
        drop_remote(self._ctx, channel_name)
        with self._flusher.cond:
            local = self._flusher.open.get(channel_name)
            if local is not None:
                local._close_locked("the channel was dropped by drop_channel")

    def get_channel_statuses(self, channel_names: Sequence[str]) -> dict[str, ChannelStatus]:
        """The status of each named channel the server knows (unknown ones are left out)."""
        self._check_open()
        return fetch_statuses(self._ctx, list(channel_names))

    def get_latest_committed_offset_tokens(self, channel_names: Sequence[str]) -> dict[str, str | None]:
        """Each named channel's latest committed offset token (None: nothing committed, or unknown)."""
        names = list(channel_names)
        statuses = self.get_channel_statuses(names)
        return {n: (statuses[n].last_committed_offset_token if n in statuses else None) for n in names}

    # ------------------------------------------------------------------------------------ flush

    def initiate_flush(self) -> None:
        """Send every channel's buffered rows now, without waiting for max_client_lag."""
        self._check_open()
        self._flusher.flush_all()

    def wait_for_flush(self, timeout_seconds: float | None = None) -> None:
        """Send the rows appended so far on every channel and wait until the server accepted them."""
        self._check_open()
        deadline = self._ctx.deadline(timeout_seconds)
        self._flusher.wait_flushed(self._flusher.flush_all(), deadline)

    def close(self, wait_for_flush: bool = True, timeout_seconds: float | None = None) -> None:
        """Flush (when asked), then stop the background threads and close every channel.

        Rows still buffered after the flush (or all of them, without it) are dropped; the flush's
        error is raised after everything is stopped.
        """
        if self._closed:
            return
        try:
            if wait_for_flush:
                self.wait_for_flush(timeout_seconds)
        finally:
            self._closed = True
            self._finalizer.detach()
            self._session.aborted.set()
            dropped = self._flusher.shutdown()
            self._transport.close()  # first, so a sender inside a request returns sooner
            self._flusher.join(CLOSE_JOIN_TIMEOUT_S)
            if dropped:
                log.warning(
                    "streaming client %s closed with %d buffered rows dropped", self.client_name, dropped
                )

    def __enter__(self) -> StreamingIngestClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"StreamingIngestClient({self.client_name!r}, {self.fully_qualified_pipe_name!r})"
