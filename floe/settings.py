"""The one settings tree. Built once at start-up (``Settings()``) and passed down.

Every field can be set from the environment with the ``FLOE_`` prefix and ``__`` between levels,
for example ``FLOE_REDIS__URL`` or ``FLOE_API__PORT``. Nothing else in Floe reads ``os.environ``.
"""

from __future__ import annotations

import base64
import json
import secrets
from pathlib import Path
from typing import Any, Literal, Self, cast

import redis
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from redis.cluster import RedisCluster

from floe.keys import RedisClient, check_slots


class _Section(BaseModel):
    """A group of settings; each field's docstring becomes its description (shown in the docs)."""

    model_config = ConfigDict(use_attribute_docstrings=True)


class AwsSettings(_Section):
    """Where S3 and SQS live (LocalStack by default)."""

    endpoint_url: str = "http://127.0.0.1:4566"
    """S3/SQS endpoint; empty string means real AWS."""
    region: str = "us-east-1"
    """AWS region for every client."""
    access_key_id: str = "test"
    """Access key id (LocalStack accepts 'test')."""
    secret_access_key: SecretStr = SecretStr("test")
    """Secret access key; never logged."""


class RedisSettings(_Section):
    """The Redis that holds the catalog, the pipe queues, file states and load history."""

    url: str = "redis://127.0.0.1:6379/0"
    """Redis connection URL."""
    prefix: str = "floe"
    """Prefix of every key Floe writes, so several deployments (or tests) can share one Redis."""
    username: str = "floe"
    """ACL user Floe signs in as when a password is set (the stack's Redis has no other user)."""
    password: SecretStr | None = None
    """Password of ``username``; if unset, read from ``password_file`` when that file exists."""
    password_file: str = ".floe/redis.password"
    """File (mode 0600) holding the password; the stack creates it when it first starts Redis."""
    cluster: bool = False
    """``url`` names one node of a Redis Cluster: every client is a ``redis.cluster.RedisCluster``,
    which finds the other nodes and sends each key to the node that owns its slot. The stack then
    starts (``make up``) and stops a local cluster of three primaries, ``url``'s port and the two after it."""
    check_slots: bool = False
    """Refuse every Lua script, transaction and multi-key command whose keys lie in more than one
    cluster slot, even on a single Redis (``floe.keys.one_slot``). The tests turn it on, so a step that
    could not run on a Redis Cluster fails them; it costs a CRC16 per key."""

    @field_validator("prefix")
    @classmethod
    def _no_braces(cls, prefix: str) -> str:
        # A brace in the prefix would make it the hash tag of every key (the first {...} decides),
        # putting every pipe on one cluster slot, or splitting the keys of one step over several.
        if "{" in prefix or "}" in prefix:
            raise ValueError(
                "the Redis key prefix must not contain { or }: Floe's keys put their hash tag there"
            )
        return prefix

    def resolve_password(self) -> str | None:
        """The password to sign in with, or None when Redis needs none."""
        if self.password is not None:
            return self.password.get_secret_value()
        try:
            return Path(self.password_file).read_text().strip() or None
        except FileNotFoundError:
            return None

    def client(self, **options: Any) -> RedisClient:
        """A client of this Redis (a ``RedisCluster`` when ``cluster`` is set), signed in when a
        password is known. Options go to redis-py. A cluster client asks ``url``'s node for the
        cluster's layout at once, so it raises (``RedisClusterException``) when none answers."""
        if self.check_slots:
            check_slots()
        password = self.resolve_password()
        if password is not None:
            options.setdefault("username", self.username)
            options.setdefault("password", password)
        if self.cluster:
            # redis-stubs types RedisCluster apart from Redis (and without its script commands, which
            # it has); it answers every command of RedisClient.
            return cast(RedisClient, RedisCluster.from_url(self.url, **options))
        return redis.Redis.from_url(self.url, **options)


MIN_METRICS_TOKEN = 32
"""Characters a scrape token has at least: it is compared, never rate-limited, so it must not be
guessable (``secrets.token_urlsafe(32)`` gives 43)."""


def _check_metrics_token(token: str, setting: str) -> str:
    if len(token) < MIN_METRICS_TOKEN:
        raise ValueError(
            f"{setting} must be at least {MIN_METRICS_TOKEN} characters; make one with "
            "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return token


class ApiSettings(_Section):
    """The REST API (Snowpipe endpoints, SQL endpoint, health, metrics)."""

    host: str = "127.0.0.1"
    """Interface to bind; loopback unless you mean to expose it."""
    port: int = 8080
    """TCP port of the API."""
    query_cache_bytes: int = 256 * 1024 * 1024
    """Upper bound on the decoded blobs the query engine keeps in memory (an LRU cache), counted as
    the Arrow buffers they hold; 0 turns the cache off."""
    query_cache_blob_bytes: int = 16 * 1024 * 1024
    """Largest blob, decoded, that the query cache keeps. A larger one is streamed from S3 a row group
    at a time by every query that reads it, and never held whole."""
    max_body_bytes: int = 16 * 1024 * 1024
    """Largest request body accepted; enforced while reading, after authentication (413 past it)."""
    body_timeout_s: float = 30.0
    """Seconds a client may take to send a request head or a whole body (408), or to finish sending
    a body the API answered early (then the connection closes)."""
    limit_concurrency: int = 256
    """Connections and requests uvicorn serves at once; past it new ones get 503."""
    timeout_keep_alive_s: int = 5
    """Seconds an idle keep-alive connection stays open."""
    tls: Literal["off", "auto", "files"] = "off"
    """HTTPS for the API and its clients: off (plain HTTP); auto (a local CA and a server certificate
    for 127.0.0.1, localhost and ``host`` under <state_dir>/tls/, created or renewed at start); files
    (``tls_cert_file`` and ``tls_key_file``, verified against ``tls_ca_file``)."""
    tls_cert_file: str = ""
    """With tls=files: PEM server certificate, followed by any intermediate certificates."""
    tls_key_file: str = ""
    """With tls=files: PEM private key of ``tls_cert_file`` (unencrypted; keep it 0600)."""
    tls_ca_file: str = ""
    """With tls=files: PEM CA certificates clients verify the API against; empty means the system's
    trust store. With tls=auto clients use <state_dir>/tls/ca.crt."""
    metrics_token: SecretStr | None = None
    """Bearer token that reads every process's metrics page when ``host`` is not loopback (there
    a page answers only this token or, on the API, a user whose role holds MONITOR on the account);
    at least 32 characters. If unset, read from ``metrics_token_file`` when that is set."""
    metrics_token_file: str = ""
    """File holding ``metrics_token`` (a scraper reads the same file: Prometheus's
    ``credentials_file``); empty: none."""

    @field_validator("metrics_token")
    @classmethod
    def _long_enough(cls, token: SecretStr | None) -> SecretStr | None:
        if token is not None:
            _check_metrics_token(token.get_secret_value(), "FLOE_API__METRICS_TOKEN (api.metrics_token)")
        return token

    def resolve_metrics_token(self) -> str | None:
        """The scrape token, or None when neither setting gives one; ValueError naming the setting
        when ``metrics_token_file`` is missing or holds a token too short to resist guessing."""
        if self.metrics_token is not None:
            return self.metrics_token.get_secret_value()
        if not self.metrics_token_file:
            return None
        setting = f"FLOE_API__METRICS_TOKEN_FILE ({self.metrics_token_file})"
        try:
            token = Path(self.metrics_token_file).read_text().strip()
        except OSError as exc:
            raise ValueError(
                f"cannot read {setting}: {exc.strerror}; create it or unset the setting"
            ) from None
        return _check_metrics_token(token, setting)

    @model_validator(mode="after")
    def _auto_owns_its_files(self) -> Self:
        # Silently ignoring a file the operator named would serve a certificate they did not choose.
        named = [n for n in ("tls_cert_file", "tls_key_file", "tls_ca_file") if getattr(self, n)]
        if self.tls == "auto" and named:
            raise ValueError(
                f"tls=auto creates its own files under <state_dir>/tls/; unset {', '.join(named)} "
                "or use tls=files"
            )
        return self


class ConsoleSettings(_Section):
    """The web console the API serves at /console (services/console)."""

    code_ttl_s: int = Field(default=60, gt=0)
    """How long the one-time sign-in link `floe console` prints stays valid (it works once)."""
    session_ttl_s: int = Field(default=8 * 3600, gt=0)
    """How long a console session lasts after sign-in; then `floe console` again."""
    refresh_s: float = Field(default=1.0, gt=0)
    """How often an open page refreshes its data; a page whose statements take longer waits four
    times their duration instead, so a viewer never keeps more than a fifth of a thread busy."""
    sparkline_refresh_s: float = Field(default=10.0, gt=0)
    """How often the pipes page recomputes its per-minute sparklines from COPY_HISTORY (a read of
    the table's load history of the last day), at most; the state and queue refresh every page."""
    max_pipes: int = Field(default=50, gt=0)
    """Pipes the pipes page shows, the newest first (each costs a SYSTEM$PIPE_STATUS every second);
    `floe status --like` or SQL reaches the others."""
    sparkline_budget_s: float = Field(default=1.0, gt=0)
    """Seconds one pipes-page request may spend computing sparklines; the tables past it show the
    ones computed before, or "computing", until a later poll reaches them."""
    history_rows: int = Field(default=200, gt=0)
    """Files a pipe's history page lists at most (the newest first), after its search and filter."""
    sample_rows: int = Field(default=10, gt=0)
    """Rows the tables page shows of the table picked."""
    sql_rows: int = Field(default=500, gt=0)
    """Rows the SQL box shows of a result (all are counted)."""
    public_url: str = ""
    """Base URL browsers reach the API at (behind a proxy, say), for the link `floe console`
    prints; empty: the address the CLI reaches the API at."""


class QuerySettings(_Section):
    """Limits of one SQL query in the API's query engine (a sandboxed DuckDB)."""

    timeout_s: float = 60.0
    """A query running longer is interrupted and fails with a timeout error."""
    memory_limit: str = "2GB"
    """DuckDB memory_limit of one query's connection. Tables are streamed into DuckDB, so a query
    holds this at most plus about a row group per table it is reading (and the shared query cache,
    ``api.query_cache_bytes``), whatever the tables' sizes."""
    threads: int = 2
    """DuckDB threads of one query's connection."""
    max_result_rows: int = 100_000
    """A query whose result has more rows fails, unless it is streamed (`floe sql`, ``"stream": true``)."""
    page_rows: int = Field(default=10_000, gt=0)
    """Rows per page of a streamed result; the API holds a couple of pages of it at a time."""
    max_concurrent: int = 4
    """Queries run at once per API process; the others wait, so REST calls keep their threads."""
    max_value_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    """Largest value a query may make or answer (Snowflake's largest VARCHAR, 16 MiB). DuckDB's
    ``memory_limit`` does not cover the strings a function makes, so REPEAT, LPAD, REPLACE, CONCAT
    and every other function whose output can outgrow its inputs is checked before it runs: one
    value against this, and the values it makes for the rows DuckDB evaluates at once against the
    query's share of ``memory_limit`` (services/value_bounds.py)."""
    infer_schema_footer_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    """Largest footer INFER_SCHEMA reads of a Parquet or ORC file (Parquet's as stored, ORC's
    inflated), and what it reads of such a file's end; a file with a larger footer fails the call.
    Only the schema is handed to pyarrow, never the row groups, stripes or statistics (decision 117)."""
    infer_schema_max_columns: int = Field(default=10_000, gt=0)
    """Most columns INFER_SCHEMA reads of one file (a CSV record's fields, a JSON document's keys, a
    Parquet or ORC schema's columns and nested fields) and answers over all its files (of which it
    holds at most 100 times this many columns, the files' columns counted each); past it the call
    fails."""


class ConsumerSettings(_Section):
    """The SQS consumer that turns S3 notifications into pipe queue entries."""

    queue_name: str = "floe-ingest"
    """SQS queue that stage buckets notify."""
    dlq_name: str = "floe-ingest-dlq"
    """Dead-letter queue for messages that cannot be parsed or routed."""
    max_receive_count: int = 5
    """Deliveries of one message before SQS moves it to the dead-letter queue."""
    visibility_timeout_s: int = 60
    """Seconds a received message stays hidden from other consumers."""
    wait_time_s: int = 10
    """Long-poll wait of one ReceiveMessage call."""
    concurrency: int = 4
    """Concurrent ReceiveMessage loops inside one consumer process."""
    metrics_port: int = Field(default=9401, ge=0, le=65535)
    """Port of the consumer's Prometheus metrics, on ``api.host``; 0 serves none. Several consumers
    on one host each need their own (FLOE_CONSUMER__METRICS_PORT per process)."""


class BackfillSettings(_Section):
    """Backfill, a Floe extension: a pipe's BACKFILL_INTERVAL has a consumer list its location every
    interval and queue the files no notification announced."""

    min_interval_s: int = Field(default=60, gt=0)
    """The shortest BACKFILL_INTERVAL CREATE PIPE accepts (each backfill lists the stage's last 7
    days, which costs S3 requests); a pipe made with a shorter one under other settings is listed
    this often at most."""
    poll_s: float = Field(default=5.0, gt=0)
    """How often each consumer looks for pipes whose backfill is due; a backfill starts at most
    this long after its interval ends."""


class ErrorNotificationSettings(_Section):
    """Error notifications: the consumers publish the files whose load failed to the SNS topic of
    each pipe's ERROR_INTEGRATION."""

    poll_s: float = Field(default=1.0, gt=0)
    """How often each consumer looks for new load failures to publish."""
    batch_events: int = Field(default=100, gt=0)
    """Load events read per pipe per step (each failed one is a message; SNS takes 10 per call)."""
    lease_s: float = Field(default=60.0, gt=0)
    """How long one consumer holds a pipe's notifications: if it dies, another takes over after
    this, and sends again what it had sent but not recorded (at least once)."""
    give_up_after_s: int = Field(default=24 * 3600, gt=0)
    """A failure whose message SNS keeps refusing (topic gone, no permission) is retried each step
    until it is this old, then dropped with an error in the log, so later failures are not held
    back for ever."""


class PipelineSettings(_Section):
    """The Spark Structured Streaming job."""

    spark_master: str = "local[2]"
    """Spark master URL: ``local[n]``, or a standalone cluster's ``spark://host:7077``."""
    spark_driver_host: str = "127.0.0.1"
    """Address a cluster's executors reach the job's driver at (this host's address on a network;
    loopback for a cluster on this machine, ``make cluster-up``)."""
    spark_conf: dict[str, str] = Field(default_factory=dict)
    """Extra Spark properties for the job's session, e.g. a cluster's ``spark.executor.memory`` or
    ``spark.cores.max`` (FLOE_PIPELINE__SPARK_CONF='{"spark.cores.max": "2"}')."""
    checkpoint_dir: str = ".floe/checkpoints/pipeline"
    """Streaming checkpoint directory (offsets and commits of the query)."""
    trigger_interval_ms: int = 250
    """Micro-batch trigger interval."""
    max_files_per_batch: int = 2000
    """Upper bound on files planned into one micro-batch."""
    max_appends_per_batch: int = 64
    """Upper bound on one streaming pipe's channel appends (up to 4 MB each) in one micro-batch."""
    partitions: int = 2
    """Spark tasks per micro-batch (at most one per file)."""
    driver_batch_files: int = Field(default=64, ge=0)
    """A micro-batch of at most this many files (and ``driver_batch_bytes``) loads in the job's
    driver, without a Spark job, whose start-up costs more than a few small files do (0: never)."""
    driver_batch_bytes: int = Field(default=16 * 1024 * 1024, ge=0)
    """Most stored bytes a micro-batch loaded in the driver may hold; a file of unknown size, or
    more bytes, go to Spark's tasks."""
    tables_bucket: str = "floe-tables"
    """Floe-owned bucket that holds the table blobs."""
    driver_memory: str = "2g"
    """spark.driver.memory for the local job."""
    prefetch_files: int = 8
    """Staged files each task reads ahead of the one it parses (S3 latency hides behind parsing)."""
    prefetch_bytes: int = 256 * 1024 * 1024
    """Upper bound on the known bytes read ahead per task; a file of unknown size counts as all of it."""
    stream_file_bytes: int = 64 * 1024 * 1024
    """Staged CSV, JSON and Parquet files larger than this (stored) are loaded in parts instead of
    whole: CSV and JSON read as a stream, Parquet a few row groups at a time (decision 83)."""
    chunk_bytes: int = 32 * 1024 * 1024
    """Uncompressed bytes of a streamed file parsed at a time; each part's rows become one blob."""
    max_file_bytes: int = 16 * 1024 * 1024 * 1024
    """Largest decompressed size of one staged file (Parquet, Avro and ORC: decoded size, what its
    values take once read); past it the file fails (decompression and decode bombs)."""
    max_part_bytes: int = 256 * 1024 * 1024
    """Largest decompressed piece held in memory at once: a whole-read file (past it, a CSV, JSON or
    Parquet file is loaded in parts instead), a part of a streamed file that has not reached a record
    end, or a Parquet row; past it the file fails. Parquet, Avro and ORC count decoded values,
    dictionary-expanded strings, NULLs and list values included; CSV and JSON their text and what
    each record costs once parsed (decision 110)."""
    max_errors_per_file: int = Field(default=100, ge=1, le=10_000)
    """Errors of one file whose detail (message, place, record) is kept for 14 days and shown by
    VALIDATE_PIPE_LOAD; the file's error count in COPY_HISTORY counts them all."""
    duckdb_memory_limit: str = "1GB"
    """DuckDB memory_limit of each transform connection on the workers."""
    metrics_port: int = Field(default=9402, ge=0, le=65535)
    """Port of the Spark job driver's Prometheus metrics, on ``api.host``; 0 serves none."""
    heartbeat_s: float = Field(default=5.0, gt=0)
    """How often the job writes its heartbeat to Redis while its streaming query runs; the API's
    /readyz counts the job gone after three intervals without one."""


class StageSettings(_Section):
    """Internal stages (named stages without a URL, and every table's stage ``@%t``): their files
    live encrypted in a bucket Floe owns, and move through the API (``floe put``, ``floe get``)."""

    bucket: str = "floe-stages"
    """Floe-owned bucket that holds the internal stages' files, each sealed under Floe's master key
    (``floe/stage_crypto.py``). Apart from the tables bucket, so that access to one is not access to
    the other; no storage integration and no external stage may name it. Created on first use."""
    max_file_bytes: int = Field(default=5 * 1024**3, gt=0)
    """Largest file one PUT may store, as sent (after the client's compression); past it the upload
    fails with 413 and nothing is stored."""
    part_bytes: int = Field(default=8 * 1024 * 1024, ge=5 * 1024 * 1024)
    """Encrypted bytes an upload gathers before sending them to S3 as one part of a multipart upload
    (S3's minimum part is 5 MiB): an upload holds about this much in the API at once."""
    idle_timeout_s: float = Field(default=60.0, gt=0)
    """Seconds an upload may wait for the client's next bytes, and a download for the client to take
    the next ones, before it fails; the whole transfer has no time limit."""
    max_concurrent_transfers: int = Field(default=8, gt=0)
    """Uploads and downloads one API process serves at once; more wait for a slot."""
    max_list_files: int = Field(default=100_000, gt=0)
    """Files one LIST, REMOVE or GET may name; past it the statement fails and asks for a narrower
    path or PATTERN."""


class EncryptionSettings(_Section):
    """Envelope encryption of blobs: random data keys wrapped by a master key."""

    master_key: SecretStr | None = None
    """Base64 of a 32-byte master key; if unset, read or create ``master_key_file``."""
    master_key_file: str = ".floe/master.key"
    """File that holds the base64 master key when ``master_key`` is unset."""
    master_key_id: str = "floe-master-1"
    """Identifier recorded in blob metadata; lets a KMS-backed provider pick the key later."""

    def resolve_master_key(self) -> bytes:
        """Return the 32-byte master key, creating the key file on first use."""
        if self.master_key is not None:
            raw = base64.b64decode(self.master_key.get_secret_value())
        else:
            # Imported here: keypair pulls in the crypto stack, which most users of settings never need.
            from floe.keypair import create_private_file

            # O_EXCL and link() make every process that starts at once end up with the same key.
            text = create_private_file(
                self.master_key_file, lambda: base64.b64encode(secrets.token_bytes(32))
            )
            raw = base64.b64decode(text.strip())
        if len(raw) != 32:
            raise ValueError("the master key must be 32 bytes (base64 of 32 random bytes)")
        return raw


class AuthSettings(_Section):
    """Key-pair JWT authentication of the REST and SQL endpoints."""

    admin_user: str = "FLOE_ADMIN"
    """User the API creates at start-up with the ACCOUNTADMIN role; `floe sql` signs as this user."""
    admin_key_file: str = ".floe/admin_rsa_key.p8"
    """PEM (PKCS#8) private key of the admin user; the API creates it on first start."""
    max_token_lifetime_s: int = 3600
    """Longest accepted span from a token's iat to its exp (Snowflake allows one hour)."""
    clock_skew_s: int = 60
    """Tolerance for clocks that disagree when checking iat and exp."""
    rate_limit_per_s: float = 1000.0
    """Requests per second each user may make to the REST endpoints (per API process); 0 disables."""
    rate_limit_burst: int = 2000
    """Requests a user may make at once before the rate limit applies."""
    sql_rate_limit_per_s: float = 20.0
    """SQL statements per second each user may run (per API process); 0 disables."""
    sql_rate_limit_burst: int = 40
    """SQL statements a user may run at once before its rate limit applies."""
    failed_auth_per_s: float = 2.0
    """Failed authentications per second allowed from one client address; past it, 429."""
    failed_auth_burst: int = 20
    """Failed authentications one client address may make at once before that limit applies."""
    scoped_token_key_file: str = ".floe/scoped_token.key"
    """Secret that signs the scoped tokens of POST /oauth/token (created 0600 on first start)."""
    scoped_token_lifetime_s: int = 3600
    """How long a scoped token (accepted only by the streaming routes) stays valid."""


class StreamingSettings(_Section):
    """Snowpipe Streaming: channels, appends and their limits."""

    # What waits in Redis for the pipeline: each append counts its rows' bytes as stored
    # (decompressed) plus floe.channel_quotas.APPEND_OVERHEAD_BYTES, and its rows. An append goes in
    # while every holder it counts against is under its bounds after it, or holds nothing yet (so a
    # bound below one append never stops a channel); past a bound it gets 503 until the pipeline
    # commits. Reopening or dropping a channel frees nothing: its rows wait in Redis all the same.
    max_pending_bytes_per_channel: int = Field(default=64 * 1024 * 1024, gt=0)
    """Bytes one channel may hold appended and not yet committed."""
    max_pending_bytes_per_pipe: int = Field(default=256 * 1024 * 1024, gt=0)
    """Bytes all channels of one pipe may hold appended and not yet committed."""
    max_pending_bytes_per_table: int = Field(default=256 * 1024 * 1024, gt=0)
    """Bytes all channels into one table (every streaming pipe of it) may hold not yet committed."""
    max_pending_bytes_per_user: int = Field(default=128 * 1024 * 1024, gt=0)
    """Bytes one user's appends, over every channel, pipe and table, may hold not yet committed: what
    one tenant can make the shared Redis hold."""
    max_pending_rows_per_pipe: int = Field(default=20_000_000, gt=0)
    """Rows all channels of one pipe may hold appended and not yet committed."""
    max_pending_rows_per_table: int = Field(default=20_000_000, gt=0)
    """Rows all channels into one table may hold appended and not yet committed."""
    max_pending_rows_per_user: int = Field(default=10_000_000, gt=0)
    """Rows one user's appends may hold not yet committed (tiny rows cost the job per row)."""
    max_channels_per_pipe: int = Field(default=2000, gt=0)
    """Channels one pipe may have (Snowflake's default); opening one more answers 400 until one is
    dropped or expires. Reopening an existing channel is never refused."""
    max_channels_per_table: int = Field(default=2000, gt=0)
    """Channels all streaming pipes of one table may have together."""
    max_channels_per_user: int = Field(default=2000, gt=0)
    """Channels one user may have created, over every pipe (a channel counts for its creator)."""
    appends_per_s_per_channel: float = 10.0
    """Appends per second one channel may make (Snowflake's 10 requests/s); past it, 429. 0 disables."""
    appends_burst_per_channel: int = 20
    """Appends one channel may make at once before its rate applies."""
    appends_per_s_per_user: float = 50.0
    """Appends per second one user may make over all its channels (per API process); past it, 429.
    0 disables."""
    appends_burst_per_user: int = 100
    """Appends one user may make at once before its rate applies."""


class ExternalFunctionSettings(_Section):
    """Calls to external functions' remote services (``floe.external``)."""

    max_batch_rows: int = 1000
    """Rows per request when a function sets no MAX_BATCH_ROWS."""
    max_batch_bytes: int = 4 * 1024 * 1024
    """Largest request body before compression; a single row larger than this is sent alone."""
    max_concurrency: int = 8
    """Requests one call keeps in flight at once."""
    request_timeout_s: float = 30.0
    """Seconds one HTTP attempt may take: to connect, to send, and to receive the whole answer."""
    retry_timeout_s: float = 60.0
    """Seconds one batch of a query may spend retrying transport errors, 429 and 5xx answers before
    it fails."""
    pipe_retry_timeout_s: float = 10.0
    """Seconds one batch of a pipe's load may take, its attempts and retries included: a micro-batch
    holds every pipe's files while one waits, so this is kept shorter than retry_timeout_s."""
    breaker_cooldown_s: float = 30.0
    """After a batch fails for want of an answer, calls to that service fail at once (and pipes
    calling it wait) for this long; each further failure of the same outage doubles it."""
    breaker_max_cooldown_s: float = 600.0
    """Longest cooldown; a failure this long after the last cooldown ended starts a new outage."""
    backoff_base_s: float = 0.1
    """First retry's backoff ceiling; each retry doubles it (the wait is drawn at random below it)."""
    backoff_max_s: float = 10.0
    """Largest wait between two attempts, and the cap on a Retry-After the service asks for."""
    max_response_bytes: int = 64 * 1024 * 1024
    """Largest response body, after decompression; a larger answer fails its batch."""
    cache_entries: int = 100_000
    """Results of IMMUTABLE functions kept per process (least recently used go first); 0 disables."""
    cache_bytes: int = 64 * 1024 * 1024
    """Approximate bytes of arguments and results that cache may hold."""


class FaultSettings(_Section):
    """Fault injection for the chaos tests (tests/chaos); leave it empty in production."""

    crash_at: str = ""
    """Named point at which the process kills its whole process group with SIGKILL: pipeline.reading,
    pipeline.after_blobs, pipeline.between_commits (after each pipe's commit), pipeline.after_commit,
    consumer.after_receive or consumer.after_enqueue; empty means never."""
    crash_on_hit: int = 1
    """Crash the n-th time this process reaches the point."""
    record_file: str = ""
    """File a process appends ``<point> <pid>`` to, synced, just before it crashes itself: the chaos
    tests' evidence that the fault fired (a Spark worker's log lines die with the JVM that relays them)."""
    enqueue_delay_s: float = 0.0
    """Seconds the consumer sleeps inside each message's dedup step (a step that outlasts SQS's
    visibility timeout)."""
    commit_delay_s: float = 0.0
    """Seconds the Spark job waits between writing a micro-batch's blobs and committing them, after
    logging that it does (a batch in flight that a test can act on, say with CREATE OR REPLACE PIPE)."""
    read_delay_s: float = 0.0
    """Seconds a Spark task waits after fetching each staged file, as from a slow store: a batch stays
    in flight long enough for a test to act on it (kill a cluster worker, say)."""
    load_path: Literal["", "driver", "tasks"] = ""
    """Where the Spark job loads every micro-batch, whatever its size: ``driver`` or ``tasks`` (Spark
    tasks), so a chaos test knows which path its kill hits; empty means by size
    (``pipeline.driver_batch_files``)."""
    arm_file: str = ""
    """JSON object of the fields above that overrides them while the file exists, re-read whenever it
    changes (hit counts start again): the chaos tests arm and disarm a running process through it
    rather than restart it with other settings. Empty means the settings alone."""


class Settings(BaseSettings):
    """Root of the settings tree."""

    model_config = SettingsConfigDict(
        env_prefix="FLOE_", env_nested_delimiter="__", extra="ignore", use_attribute_docstrings=True
    )

    account: str = "FLOE"
    """Account identifier; JWTs must name it."""
    database: str = "FLOE"
    """Default database for unqualified names."""
    schema_name: str = "PUBLIC"
    """Default schema for unqualified names."""
    state_dir: str = ".floe"
    """Where pid files, logs and keys go."""
    auto_configure_notifications: bool = True
    """CREATE PIPE AUTO_INGEST=TRUE configures the stage bucket's S3 notification to Floe's queue."""
    stages_without_integration: bool = False
    """Let CREATE STAGE omit STORAGE_INTEGRATION, for single-user set-ups only: any user who may create
    a stage can then read whatever Floe's own S3 credentials reach."""
    history_retention_days: int = 14
    """How long file states and load history are kept (and dedup remembers a path)."""
    log_level: str = "INFO"
    """Log level of every Floe process."""
    aws: AwsSettings = AwsSettings()
    """S3 and SQS."""
    redis: RedisSettings = RedisSettings()
    """Metadata store."""
    api: ApiSettings = ApiSettings()
    """REST API."""
    console: ConsoleSettings = ConsoleSettings()
    """Web console."""
    query: QuerySettings = QuerySettings()
    """Query limits."""
    consumer: ConsumerSettings = ConsumerSettings()
    """SQS consumer."""
    backfill: BackfillSettings = BackfillSettings()
    """Pipes' BACKFILL_INTERVAL listings (run by the consumers)."""
    error_notifications: ErrorNotificationSettings = ErrorNotificationSettings()
    """Pipes' ERROR_INTEGRATION messages to SNS (sent by the consumers)."""
    pipeline: PipelineSettings = PipelineSettings()
    """Spark job."""
    encryption: EncryptionSettings = EncryptionSettings()
    """Blob encryption."""
    stages: StageSettings = StageSettings()
    """Internal stages' bucket and transfer limits."""
    auth: AuthSettings = AuthSettings()
    """REST and SQL authentication."""
    streaming: StreamingSettings = StreamingSettings()
    """Snowpipe Streaming channels."""
    external_functions: ExternalFunctionSettings = ExternalFunctionSettings()
    """Calls to external functions' remote services."""
    faults: FaultSettings = FaultSettings()
    """Fault injection (tests only)."""

    def worker_json(self) -> str:
        """These settings as JSON with the secrets readable, for processes that cannot build their own.

        Spark's Python workers get the job's settings through the task closure; a plain dump
        masks SecretStr values, and the workers would then sign S3 requests with '**********'.
        The JSON never goes to a log.
        """
        dumped = self.model_dump(mode="json")
        dumped["aws"]["secret_access_key"] = self.aws.secret_access_key.get_secret_value()
        dumped["redis"]["password"] = self.redis.resolve_password()
        key = self.encryption.master_key
        dumped["encryption"]["master_key"] = key.get_secret_value() if key is not None else None
        return json.dumps(dumped)

    def child_env(self) -> dict[str, str]:
        """The FLOE_ environment variables that reproduce these settings in a child process."""
        env: dict[str, str] = {}

        def walk(prefix: str, data: dict[str, Any], section: BaseModel) -> None:
            for key, value in data.items():
                name = f"{prefix}{key.upper()}"
                if isinstance(getattr(section, key, None), BaseModel):
                    walk(f"{name}__", value, getattr(section, key))
                elif isinstance(value, dict | list):
                    # As JSON: a variable per key would lose the keys' case (Spark's are camelCase).
                    env[name] = json.dumps(value)
                elif value is not None:
                    env[name] = str(value).lower() if isinstance(value, bool) else str(value)

        walk("FLOE_", json.loads(self.worker_json()), self)
        return env

    @property
    def retention_seconds(self) -> int:
        """History and dedup retention in seconds."""
        return self.history_retention_days * 86400
