"""Snowflake's official streaming SDK, ``snowpipe-streaming==1.9.1`` from PyPI, unchanged, against
Floe over HTTPS in rowset mode (issue 32; docs/streaming-sdk-protocol.md holds what it sends).

The SDK runs in a process of its own (tests/e2e/sdk_producer.py, driven a JSON command at a time):
its native core keeps threads and process-wide settings. It verifies TLS against ``SSL_CERT_FILE``,
set in that process only, and refuses a plain ``http`` URL, so the module starts a second
``floe api`` with ``api.tls=auto`` on the session stack's Redis prefix, queue and buckets, beside
the plain one: the session's consumer and Spark job load what the SDK appends, and the tests read
the table back through the plain API, as an observer the SDK's API kill does not touch.

The client properties are what the README shows a user: the URL, account, user and key, and the
three that keep the SDK in rowset mode (docs/streaming-sdk-protocol.md, section 6). The retry
budgets are cut from the SDK's 10 hours to a minute, so a refused call fails the test, not the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from floe.runtime import free_port
from floe.tls import api_base_url, tls_files
from infra.stack import _api_answers
from tests.chaos.oracle import assert_channels_exactly_once, scan_table, waiting_appends
from tests.conftest import ROOT, Stack, unique, wait_until
from tests.e2e.sdk_producer import sent_rows

pytestmark = pytest.mark.e2e

ROWSET_MODE = {
    # The SDK sends a flush of more than about 1 MB as files to a stage (file mode) unless both
    # limits are raised; and it switches to file mode when told to or after six 429s in a row
    # unless told to ignore that.
    "max_buffered_kb_for_rowset_mode": 65535,
    "max_rowset_payload_size_mb": 64,
    "ignore_switch_to_file_mode": "true",
}
RETRY_BUDGET = {"mgmt_retry_total_backoff_seconds": 60, "data_retry_total_backoff_seconds": 60}
COMMIT_S = 300
"""How long a ``wait_for_commit`` may take: generous, as a machine busy with other tests slows the
Spark job's micro-batches far more than the SDK."""
ANSWER_S = COMMIT_S + 60.0
"""How long one command may take: a wait for a commit, or an open retried while a job restarts."""
ROWS = 100_000
CHANNELS = 4
BATCH = 1_000
"""Rows per ``append_rows`` call; the SDK buffers them and sends a channel's buffer once a second."""


@pytest.fixture(scope="module")
def sdk_api(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A `floe api` over HTTPS (``api.tls=auto``, its CA under its own state directory) on the session
    stack's Redis prefix, queue and buckets, so the session's consumer and Spark job serve it."""
    state = tmp_path_factory.mktemp("floe-sdk-api")
    settings = stack.settings.model_copy(
        update={
            "state_dir": str(state),
            "api": stack.settings.api.model_copy(update={"port": free_port(), "tls": "auto"}),
        },
        deep=True,
    )
    logs = state / "logs"
    logs.mkdir()
    api = Stack(settings, {**stack.env, **settings.child_env()}, {}, logs)
    try:
        start_api(api)
        yield api
    finally:
        api.stop("api")


def start_api(api: Stack) -> None:
    api.start("api")
    # The ready file comes at application start-up, just before uvicorn binds the port.
    wait_until(lambda: _api_answers(api.settings), timeout=30, what="the HTTPS API to answer /health")


@pytest.fixture
def sdk_api_up(sdk_api: Stack) -> Stack:
    """The HTTPS API, restarted first if a failed test left it killed."""
    proc = sdk_api.procs.get("api")
    if proc is None or proc.poll() is not None:
        start_api(sdk_api)
    return sdk_api


def sdk_properties(api: Stack) -> dict[str, Any]:
    """The SDK's client properties for this API, as the README gives them."""
    s = api.settings
    return {
        "url": api_base_url(s),
        "account": s.account,
        "user": s.auth.admin_user,
        "private_key": Path(s.auth.admin_key_file).read_text(),
        **ROWSET_MODE,
        **RETRY_BUDGET,
    }


class SdkError(AssertionError):
    """A command the SDK process answered with an error."""


class Sdk:
    """One SDK process (tests/e2e/sdk_producer.py) and its client; ``call`` runs one command."""

    def __init__(self, api: Stack, name: str) -> None:
        files = tls_files(api.settings)
        assert files is not None and files.ca is not None
        self.log = api.logs / f"sdk-{name}.log"
        env = {
            **os.environ,
            "SSL_CERT_FILE": str(files.ca),
            "SS_LOG_TARGET": "stderr",
            "SS_LOG_LEVEL": "info",
        }
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.e2e.sdk_producer"],
                cwd=ROOT,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        self.answers: queue.Queue[str | None] = queue.Queue()
        self.took: list[str] = []
        """Each command and the seconds the SDK took over it, for a test's figures."""
        assert self.proc.stdout is not None
        self.reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self.reader.start()

    def _read(self, out: IO[str]) -> None:
        for line in out:
            self.answers.put(line)
        self.answers.put(None)

    def call(self, op: str, *, check: bool = True, timeout: float = ANSWER_S, **args: Any) -> dict[str, Any]:
        """Run one command; its answer (an error answer raises ``SdkError`` unless ``check`` is off)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        try:
            line = self.answers.get(timeout=timeout)
        except queue.Empty:
            raise SdkError(f"{op}: no answer within {timeout:.0f} s\n{self.tail()}") from None
        if line is None:
            raise SdkError(f"{op}: the SDK process exited ({self.proc.poll()})\n{self.tail()}")
        answer: dict[str, Any] = json.loads(line)
        self.took.append(f"{op} {answer['seconds']:.1f}s")
        if check and not answer["ok"]:
            raise SdkError(f"{op} failed: {answer['error']}\n{self.tail()}")
        return answer

    def tail(self) -> str:
        return "SDK log tail:\n" + self.log.read_text(errors="replace")[-3000:]

    def close(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.reader.join(10)  # it has read to the end of the exited process's output
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def sdk(sdk_api_up: Stack) -> Iterator[Any]:
    """A factory of SDK processes on the HTTPS API, each closed after the test."""
    made: list[Sdk] = []

    def make(name: str = "producer") -> Sdk:
        made.append(Sdk(sdk_api_up, f"{name}-{unique('')}"))
        return made[-1]

    yield make
    for s in made:
        s.close()


def client(sdk: Sdk, api: Stack, *, table: str | None = None, pipe: str | None = None) -> None:
    """A client on ``pipe``, or with ``from_table`` on ``table``'s default pipe."""
    where = {"table": table} if table is not None else {"pipe": pipe}
    sdk.call(
        "client", name=unique("sdk"), db="FLOE", schema="PUBLIC", properties=sdk_properties(api), **where
    )


def committed(stack: Stack, table: str) -> dict[str, int]:
    """Each channel's committed offset, from SHOW CHANNELS on the plain API (-1 before its first)."""
    rows = stack.sql(f"SHOW CHANNELS IN TABLE {table}")
    return {r["name"]: int(r["offset_token"]) if r["offset_token"] is not None else -1 for r in rows}


def all_past(stack: Stack, table: str, names: list[str], offset: int) -> bool:
    done = committed(stack, table)
    return all(done.get(n, -1) >= offset for n in names)


def sent_table(stack: Stack) -> str:
    table = unique("t_")
    stack.sql(f"CREATE TABLE {table} (ch VARCHAR, off INT NOT NULL, payload VARCHAR)")
    return table


def test_named_channels_load_100k_rows_exactly_once(stack: Stack, sdk_api_up: Stack, sdk: Any) -> None:
    """Four channels of the table's default pipe, 25k rows each, offset tokens on every call; every
    channel's ``wait_for_commit`` sees its last token; statuses and tokens read back through the
    SDK; a new client resumes from the committed token; the blob-scan oracle finds each row once."""
    table = sent_table(stack)
    names = [f"partition-{i}" for i in range(CHANNELS)]
    per = ROWS // CHANNELS
    producer = sdk()
    client(producer, sdk_api_up, pipe=f"{table}-STREAMING")
    for n in names:
        opened = producer.call("open", channel=n)
        assert opened["status_code"] == "SUCCESS" and opened["committed"] is None, opened
    for n in names:
        producer.call("send", channel=n, start=0, end=per, batch=BATCH)
    for n in names:
        assert producer.call("wait_commit", channel=n, token=str(per - 1), timeout=COMMIT_S)[
            "committed"
        ] == str(per - 1)
    got = producer.call("statuses", channels=names)
    assert got["tokens"] == dict.fromkeys(names, str(per - 1))
    for n in names:
        status = got["statuses"][n]
        assert (status["status_code"], status["rows_inserted"], status["rows_error_count"]) == (
            "SUCCESS",
            per,
            0,
        ), status
    producer.call("close")
    # A restarted producer resumes where the table says.
    client(producer, sdk_api_up, pipe=f"{table}-STREAMING")
    assert producer.call("open", channel=names[0])["committed"] == str(per - 1)
    producer.call("close")
    assert_channels_exactly_once(stack, table, Counter(r for n in names for r in sent_rows(n, 0, per)))
    print(f"SDK named channels: {', '.join(producer.took)}")


@pytest.mark.chaos
def test_named_channels_resume_from_committed_tokens_through_api_and_job_kills(
    stack: Stack, sdk_api_up: Stack, sdk: Any
) -> None:
    """kill -9 of the HTTPS API with rows buffered in the SDK, then of the Spark job with appends
    accepted but not committed; after each the producer starts a new client, reopens its channels
    and resends from the committed token. Every row exactly once by the blob-scan oracle."""
    table = sent_table(stack)
    names = [f"partition-{i}" for i in range(CHANNELS)]
    per = ROWS // CHANNELS
    producer = sdk()
    pipe = f"{table}-STREAMING"
    client(producer, sdk_api_up, pipe=pipe)
    for n in names:
        producer.call("open", channel=n)
        producer.call("send", channel=n, start=0, end=per * 2 // 5, batch=BATCH)
    wait_until(
        lambda: all_past(stack, table, names, per * 2 // 5 - 1),
        timeout=COMMIT_S,
        what="the first two fifths committed",
    )

    # 1. The API, with the next fifth buffered in the SDK or in flight.
    for n in names:
        producer.call("send", channel=n, start=per * 2 // 5, end=per * 3 // 5, batch=BATCH)
    assert sdk_api_up.stop("api", signal.SIGKILL) == -signal.SIGKILL
    start_api(sdk_api_up)
    resumed = resume(producer, sdk_api_up, pipe, names, per * 4 // 5)
    wait_until(
        lambda: all_past(stack, table, names, per * 4 // 5 - 1),
        timeout=COMMIT_S,
        what="four fifths committed",
    )

    # 2. The Spark job, with the next fifth buffered in the SDK or accepted by the API, not committed.
    for n in names:
        producer.call("send", channel=n, start=per * 4 // 5, end=per * 9 // 10, batch=BATCH)
    assert stack.stop("pipeline", signal.SIGKILL) == -signal.SIGKILL
    stack.start("pipeline")
    resumed += resume(producer, sdk_api_up, pipe, names, per)
    for n in names:
        producer.call("wait_commit", channel=n, token=str(per - 1), timeout=COMMIT_S)
    producer.call("close")
    assert_channels_exactly_once(stack, table, Counter(r for n in names for r in sent_rows(n, 0, per)))
    # Each resumption started where the table said, past zero.
    assert all(offset > 0 for offset in resumed), resumed
    print(f"SDK through kills: resumed at {resumed}; calls: {', '.join(producer.took)}")


def resume(producer: Sdk, api: Stack, pipe: str, names: list[str], end: int) -> list[int]:
    """What a restarted connector does: a new client, each channel reopened, the rows after its
    committed token sent up to ``end``; the offsets it resumed from."""
    client(producer, api, pipe=pipe)
    offsets = []
    for n in names:
        token = producer.call("open", channel=n)["committed"]
        start = int(token) + 1 if token is not None else 0
        offsets.append(start)
        producer.call("send", channel=n, start=start, end=end, batch=BATCH)
    return offsets


def test_table_mode_and_a_named_pipe_with_a_transform(stack: Stack, sdk_api_up: Stack, sdk: Any) -> None:
    """``StreamingIngestClient.from_table`` (the ``<TABLE>-STREAMING`` pipe) and a client on a named
    pipe whose COPY transforms each row."""
    table = unique("t_")
    stack.sql(f"CREATE TABLE {table} (id INT, kind VARCHAR, amount NUMBER(10,2))")
    pipe = unique("p_")
    stack.sql(
        f"CREATE PIPE {pipe} AS COPY INTO {table} FROM (SELECT $1:id, UPPER($1:kind), "
        "$1:amount::NUMBER(10,2) FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))"
    )
    producer = sdk()
    client(producer, sdk_api_up, table=table)
    producer.call("open", channel="direct")
    rows = [{"id": i, "kind": "as is", "amount": f"{i}.5"} for i in range(1, 11)]
    producer.call("append", channel="direct", rows=rows, start="1", end="10")
    producer.call("wait_commit", channel="direct", token="10", timeout=COMMIT_S)
    producer.call("close")
    client(producer, sdk_api_up, pipe=pipe)
    producer.call("open", channel="shaped")
    rows = [{"id": i, "kind": "shaped", "amount": f"{i}.25"} for i in range(11, 21)]
    producer.call("append", channel="shaped", rows=rows, start="11", end="20")
    producer.call("wait_commit", channel="shaped", token="20", timeout=COMMIT_S)
    producer.call("close")
    got = stack.sql(f"SELECT kind, COUNT(*) AS n, SUM(id) AS s, SUM(amount) AS a FROM {table} GROUP BY kind")
    assert sorted(got, key=lambda r: r["KIND"]) == [
        {"KIND": "SHAPED", "N": 10, "S": sum(range(11, 21)), "A": sum(range(11, 21)) + 2.5},
        {"KIND": "as is", "N": 10, "S": sum(range(1, 11)), "A": sum(range(1, 11)) + 5.0},
    ]


def test_the_elastic_channel_delivers_every_row_at_least_once(
    stack: Stack, sdk_api_up: Stack, sdk: Any
) -> None:
    """Two producers append to the table's elastic channel at once, no offset tokens; every row
    arrives, and a row may be there twice only if the SDK says it resent its request."""
    table = sent_table(stack)
    producers = [sdk(f"elastic{i}") for i in range(2)]
    for p in producers:
        client(p, sdk_api_up, table=table)
    per, batch = 5_000, 500
    answers: list[dict[str, Any]] = [{} for _ in producers]

    def run(i: int) -> None:
        try:
            answers[i] = producers[i].call(
                "elastic", label=f"elastic-{i}", start=0, end=per, batch=batch, timeout=COMMIT_S
            )
        except SdkError as exc:  # reported by the assertion below, not lost in the thread
            answers[i] = {"ok": False, "error": str(exc)}

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(producers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(a.get("ok") for a in answers), answers
    want = Counter(r for i in range(len(producers)) for r in sent_rows(f"elastic-{i}", 0, per))
    wait_until(
        lambda: (
            stack.sql(f"SELECT COUNT(DISTINCT ch || off) AS n FROM {table}")[0]["N"] == len(want)
            and waiting_appends(stack.settings, table) == (0, 0)
        ),
        timeout=COMMIT_S,
        what="every elastic row loaded",
    )
    rows = scan_table(stack.settings, table, lambda r: (str(r["CH"]), int(r["OFF"]), str(r["PAYLOAD"])))
    assert set(rows.rows) == set(want) and rows.missing == []
    resent = {
        (f"elastic-{i}", int(token)) for i, a in enumerate(answers) for token, n in a["acks"].items() if n > 0
    }
    twice = [r for r, n in rows.rows.items() if n > 1]
    assert all((ch, off - off % batch) in resent for ch, off, _ in twice), twice[:3]


def test_a_bad_row_is_counted_in_the_channel_status(stack: Stack, sdk_api_up: Stack, sdk: Any) -> None:
    """Rows the SDK sends as valid JSON that fail conversion on the server load no value, and the
    channel's status counts them: rows_error_count, last_error_message, its offset bound."""
    table = unique("t_")
    stack.sql(f"CREATE TABLE {table} (id INT NOT NULL, amount NUMBER(10,2))")
    producer = sdk()
    client(producer, sdk_api_up, table=table)
    producer.call("open", channel="c")
    rows: list[dict[str, Any]] = [
        {"id": 1, "amount": 1.5},
        {"id": None, "amount": 2},
        {"id": 3, "amount": "x"},
    ]
    producer.call("append", channel="c", rows=rows, start="a", end="b")
    producer.call("wait_commit", channel="c", token="b", timeout=COMMIT_S)
    status = producer.call("statuses", channels=["c"])["statuses"]["c"]
    assert (status["rows_parsed"], status["rows_inserted"], status["rows_error_count"]) == (3, 1, 2), status
    assert status["last_error_offset_upper_bound"] == "b" and status["last_error_message"], status
    assert status["last_error_timestamp"] is not None
    producer.call("close")
    assert stack.sql(f"SELECT id, amount FROM {table}") == [{"ID": 1, "AMOUNT": 1.5}]
