"""Snowflake's official streaming SDK against Floe's own client (issue 32): rows/s of each on the same
rows, in the same run, through the same HTTPS API.

The part starts a second ``floe api`` with ``api.tls=auto`` beside the run's (the SDK verifies TLS and
refuses a plain ``http`` URL), on the run's Redis prefix, queue and buckets, so the run's consumer and
Spark job load what either client sends. Both clients talk to that API, each from a process of its
own (bench/sdk_worker.py) that makes the same ``bench.streaming.stream_rows`` before the clock starts.

Each run loads a fresh table of the streaming part's six columns through its default pipe, over
``SDK_CHANNELS`` channels spread over the job's partitions, appended ``APPEND_ROWS`` rows per call.
The clock runs from the worker's first ``append_rows`` until a bulk status, asked every ``POLL_S``
from this process by Floe's client on the run's plain API, shows every channel's committed token at
its last offset; ``SELECT COUNT(*)`` must then return every row. The runs alternate, Floe's client
first, ``repeats`` each; each figure is the median.

The SDK runs in rowset mode with the client properties docs/streaming-sdk-protocol.md names (section
6); Floe's client at the streaming part's defaults (``max_client_lag`` 1 s, zstd). The SDK flushes a
channel once a second by default, as Floe's client does at that lag.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from bench.harness import BenchError, FloeStack, wait_for
from bench.streaming import (
    COMPRESSION,
    MAX_CLIENT_LAG_MS,
    POLL_S,
    CpuMeter,
    _check_status,
    _count,
    balanced_channels,
    new_table,
    open_client,
    slices,
    spread,
    warm_up,
)
from floe.runtime import free_port
from floe.tls import api_base_url, tls_files
from infra.stack import _api_answers

SDK_VERSION = "1.9.1"
"""The pinned ``snowpipe-streaming`` (pyproject.toml's dev extras)."""
SDK_CHANNELS = 4
CLIENTS = ("floe", "sdk")
ROWSET_MODE = {
    # A flush over about 1 MB goes to file mode unless both limits are raised; a switch the server
    # asks for (or six 429s in a row) is ignored.
    "max_buffered_kb_for_rowset_mode": 65535,
    "max_rowset_payload_size_mb": 64,
    "ignore_switch_to_file_mode": "true",
}
READY_S = 300.0
"""How long a worker may take to make its rows and open its channels."""

OnProgress = Callable[[str, int, int], None]


def start_tls_api(stack: FloeStack) -> FloeStack:
    """A `floe api` over HTTPS on the run's prefix, queue and buckets, with its CA under its own
    state directory (``<run>/sdk-api``); the caller stops it."""
    s = stack.settings
    settings = s.model_copy(
        update={
            "state_dir": str(stack.run_dir / "sdk-api"),
            "api": s.api.model_copy(update={"port": free_port(), "tls": "auto"}),
        },
        deep=True,
    )
    api = FloeStack(settings, stack.console)
    try:
        api.start(("api",))
        # The ready file comes at application start-up, just before uvicorn binds the port.
        wait_for(lambda: _api_answers(settings), 30.0, "the HTTPS API to answer /health", 0.1)
    except BaseException:
        api.stop()
        raise
    return api


def _ca(api: FloeStack) -> str:
    files = tls_files(api.settings)
    if files is None or files.ca is None:
        raise BenchError("the SDK part's API has no CA of its own (api.tls must be auto)")
    return str(files.ca)


def worker_config(api: FloeStack, client: str, pipe: str, channels: list[str], rows: int, seed: int) -> Any:
    """What bench/sdk_worker.py is told: the client, its properties for ``api``, the rows."""
    s = api.settings
    props: dict[str, Any] = {"url": api_base_url(s), "account": s.account, "user": s.auth.admin_user}
    if client == "sdk":
        props |= {"private_key": Path(s.auth.admin_key_file).read_text(), **ROWSET_MODE}
    else:
        props |= {
            "private_key_file": s.auth.admin_key_file,
            "ca_file": _ca(api),
            "max_client_lag": MAX_CLIENT_LAG_MS,
            "compression": COMPRESSION,
        }
    return {
        "client": client,
        "name": f"bench-{client}",
        "db": s.database,
        "schema": s.schema_name,
        "pipe": pipe,
        "channels": channels,
        "properties": props,
        "rows": rows,
        "seed": seed,
        "timeout_s": 600,
    }


class Worker:
    """A bench/sdk_worker.py process and the lines it prints."""

    def __init__(self, api: FloeStack, cfg: dict[str, Any]) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")}
        if cfg["client"] == "sdk":
            env |= {"SSL_CERT_FILE": _ca(api), "SS_LOG_TARGET": "stderr", "SS_LOG_LEVEL": "warn"}
        self.log = api.logs / f"worker-{cfg['client']}.log"
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bench.sdk_worker", json.dumps(cfg)],
                cwd=Path(__file__).resolve().parent.parent,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                start_new_session=True,  # its own session: the CPU meter reads it whole
            )
        self.lines: queue.Queue[str | None] = queue.Queue()
        assert self.proc.stdout is not None
        self.reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self.reader.start()

    def _read(self, out: IO[str]) -> None:
        for line in out:
            self.lines.put(line)
        self.lines.put(None)

    def answer(self, timeout_s: float) -> dict[str, Any]:
        """The worker's next line; BenchError when it exits or stays silent."""
        try:
            line = self.lines.get(timeout=timeout_s)
        except queue.Empty:
            line = None
        if line is None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise BenchError(f"the {self.log.stem} process did not answer (exit {self.proc.poll()}):\n{tail}")
        value: dict[str, Any] = json.loads(line)
        return value

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        self.reader.join(10)  # it has read to the end of the exited process's output
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(BrokenPipeError):
                    pipe.close()


def sdk_once(
    stack: FloeStack,
    api: FloeStack,
    client: str,
    rows: int,
    seed: int,
    meter: CpuMeter,
    *,
    label: str,
    on_progress: OnProgress | None = None,
) -> dict[str, Any]:
    """One run of ``client``: its rows over ``SDK_CHANNELS`` channels of a fresh table."""
    table = new_table(stack, client)
    partitions = stack.settings.pipeline.partitions
    names = balanced_channels("ch-", SDK_CHANNELS, partitions)
    last = {n: str(len(p) - 1) for n, p in zip(names, slices(rows, SDK_CHANNELS), strict=True)}
    worker = Worker(api, worker_config(api, client, f"{table}-STREAMING", names, rows, seed))
    try:
        worker.answer(READY_S)
        with open_client(stack, table, f"bench-{client}-poll") as poller:
            inserted = 0

            def done() -> bool:
                nonlocal inserted
                statuses = poller.get_channel_statuses(names)
                _check_status(statuses, names)
                inserted = sum(s.rows_inserted for s in statuses.values())
                if on_progress is not None:
                    on_progress(label, inserted, rows)
                tokens = {n: s.last_committed_offset_token for n, s in statuses.items()}
                return all(tokens.get(n) == last[n] for n in names)

            meter.sessions["producer"] = worker.proc.pid
            meter.start()
            worker.go()
            wait_for(done, max(180.0, rows / 5_000), f"the {client} client's {rows:,} rows to commit", POLL_S)
            end = time.monotonic()  # the arrival of the answer that shows the last commit
            cpu = meter.stop()
        times = worker.answer(60.0)
    finally:
        worker.close()
    count_s = _count(stack, table, rows, 60.0)
    elapsed = end - times["t0"]
    cpu["cpu_us_per_row"] = {k: round(v / rows * 1e6, 2) for k, v in cpu["cpu_s"].items()}
    return {
        "client": client,
        "table": table,
        "seconds": elapsed,
        "rows_per_s": rows / elapsed,
        "appends_done_s": times["appended"] - times["t0"],
        "flushed_s": times["flushed"] - times["t0"],
        "count_matched_after_s": count_s,
        **cpu,
    }


def run_sdk(
    stack: FloeStack,
    rows: int,
    repeats: int,
    seed: int,
    redis_pid: int | None,
    *,
    warm: bool = True,
    on_progress: OnProgress | None = None,
) -> dict[str, Any]:
    """``repeats`` runs of each client, alternating, on a TLS API of their own; medians, spreads and
    the SDK's rows/s over Floe's client's. ``warm``: first a few rows, one channel per Spark
    partition, so the job's first tasks (its Python workers' start) are not timed; needless right
    after the streaming part, which leaves the job warm."""
    if warm:
        warm_up(stack, stack.settings.pipeline.partitions)
    api = start_tls_api(stack)
    try:
        sessions = {**{n: stack.sid(n) for n in stack.procs}, "api_tls": api.sid("api")}
        meter = CpuMeter(sessions, redis_pid)
        runs: dict[str, list[dict[str, Any]]] = {c: [] for c in CLIENTS}
        for k in range(repeats):
            for client in CLIENTS:
                label = f"{client} client, run {k + 1}/{repeats}"
                runs[client].append(
                    sdk_once(stack, api, client, rows, seed, meter, label=label, on_progress=on_progress)
                )
    finally:
        api.stop()
    out: dict[str, Any] = {
        "rows": rows,
        "channels": SDK_CHANNELS,
        "repeats": repeats,
        "sdk_version": SDK_VERSION,
        "transport": "HTTPS to a floe api with api.tls=auto, for both clients",
        "sdk_properties": ROWSET_MODE,
    }
    for client in CLIENTS:
        rates = [r["rows_per_s"] for r in runs[client]]
        out[client] = {
            "rows_per_s": statistics.median(rates),
            "rows_per_s_spread": spread(rates),
            "seconds": statistics.median(r["seconds"] for r in runs[client]),
            "runs": runs[client],
        }
    out["sdk_over_floe_client"] = out["sdk"]["rows_per_s"] / out["floe"]["rows_per_s"]
    return out
