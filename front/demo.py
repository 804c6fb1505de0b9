"""`floe demo` (what `make run` shows): a stage, a table, an auto-ingest pipe whose transform calls
an external function, and a few files; then a few hundred rows streamed through a Snowpipe
Streaming channel, and a query calling an external function."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from floe.aws import client as aws_client
from floe.runtime import free_port
from floe.settings import Settings
from floe.streaming.transport import StreamingError
from front.client import SqlFailed, records, run_sql

BUCKET = "floe-demo"
console = Console()

ROOT = Path(__file__).resolve().parent.parent
"""The checkout: the example remote service (examples/remote_service) runs from here."""


def statements(service_url: str) -> list[str]:
    """The demo's objects; ``service_url`` is where the example remote service listens."""
    return [
        # A stage reads S3 only through a storage integration: it bounds where Floe's own credentials
        # may be pointed (README, "Access control").
        "CREATE OR REPLACE STORAGE INTEGRATION demo_lake TYPE = EXTERNAL_STAGE STORAGE_PROVIDER = 'S3' "
        f"ENABLED = TRUE STORAGE_ALLOWED_LOCATIONS = ('s3://{BUCKET}/')",
        f"CREATE OR REPLACE STAGE demo_stage URL = 's3://{BUCKET}/trips/' STORAGE_INTEGRATION = demo_lake "
        "FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1)",
        # External functions call only where an API integration allows (README, "External functions").
        "CREATE OR REPLACE API INTEGRATION demo_api API_PROVIDER = aws_api_gateway "
        f"API_ALLOWED_PREFIXES = ('{service_url}/') ENABLED = TRUE",
        "CREATE OR REPLACE EXTERNAL FUNCTION to_usd(amount NUMBER(38,2), currency VARCHAR) "
        f"RETURNS NUMBER(38,2) IMMUTABLE API_INTEGRATION = demo_api AS '{service_url}/convert'",
        "CREATE OR REPLACE EXTERNAL FUNCTION sentiment(text VARCHAR) RETURNS VARIANT "
        f"API_INTEGRATION = demo_api AS '{service_url}/sentiment'",
        "CREATE OR REPLACE TABLE trips (trip_id INT NOT NULL, city VARCHAR, fare NUMBER(10,2), "
        "fare_usd NUMBER(10,2), started_at TIMESTAMP_NTZ, source_file VARCHAR, source_row INT)",
        "CREATE OR REPLACE PIPE demo_pipe AUTO_INGEST = TRUE AS COPY INTO trips FROM "
        "(SELECT $1, UPPER($2), $3, to_usd($3, 'EUR'), $4, METADATA$FILENAME, METADATA$FILE_ROW_NUMBER "
        "FROM @demo_stage) FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1) ON_ERROR = CONTINUE",
    ]


@contextlib.contextmanager
def example_service(timeout: float = 30.0) -> Iterator[str]:
    """Run examples/remote_service on 127.0.0.1 for the length of the block; yields its URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "examples.remote_service.app:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                # Any answer means it listens (GET on a POST route is a 405).
                urllib.request.urlopen(f"{url}/convert", timeout=1).close()  # our own URL
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        "the example remote service (examples/remote_service) did not start; run "
                        f"`.venv/bin/python -m uvicorn examples.remote_service.app:app --port {port}` "
                        "to see why"
                    ) from None
                time.sleep(0.1)
        console.print(f"[green]started[/] the example remote service at {url} (examples/remote_service)")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


CITIES = ["berlin", "lisbon", "oslo", "rome", "paris"]


def sample_file(index: int, rows: int = 5) -> bytes:
    """A small CSV of trips; file 2 carries one bad fare to show ON_ERROR = CONTINUE."""
    lines = ["trip_id,city,fare,started_at"]
    for r in range(rows):
        trip = index * 100 + r
        fare = "n/a" if (index == 2 and r == 3) else f"{5 + (trip % 17) * 1.25:.2f}"
        lines.append(f"{trip},{CITIES[trip % len(CITIES)]},{fare},2026-11-{1 + index:02d} 0{r}:15:00")
    return ("\n".join(lines) + "\n").encode()


def _show(body: dict[str, Any], title: str) -> None:
    table = RichTable(title=title)
    for col in body["columns"]:
        table.add_column(col, overflow="fold")
    for row in body["rows"]:
        table.add_row(*["NULL" if v is None else str(v) for v in row])
    console.print(table)


STREAM_ROWS = 300


def stream_demo(settings: Settings) -> None:
    """Stream rows through the `trips` table's default pipe (TRIPS-STREAMING) and query them."""
    from floe.streaming import StreamingIngestClient  # the client's threads only when used

    console.print("\n[bold]Snowpipe Streaming[/]: rows through a channel, no files")
    started = time.monotonic()
    pipe = "TRIPS-STREAMING"
    with StreamingIngestClient(
        "demo", settings.database, settings.schema_name, pipe, settings=settings
    ) as client:
        channel, status = client.open_channel("demo-channel")
        last = status.latest_committed_offset_token
        first = int(last) + 1 if last is not None else 0  # resume where a previous run stopped
        rows = [
            {
                "trip_id": 10_000 + n,
                "city": CITIES[n % len(CITIES)].upper(),
                "fare": f"{4 + (n % 23) * 0.75:.2f}",
                "fare_usd": None,
                "started_at": f"2026-11-20 {n % 24:02d}:{n % 60:02d}:00",
                "source_file": "demo-channel",
                "source_row": n,
            }
            for n in range(first, first + STREAM_ROWS)
        ]
        end = str(first + STREAM_ROWS - 1)
        channel.append_rows(rows, start_offset_token=str(first), end_offset_token=end)
        console.print(
            f"[green]appended[/] {STREAM_ROWS} rows to channel demo-channel (offsets {first}..{end})"
        )
        with console.status("waiting for the rows to commit..."):
            channel.wait_for_commit(lambda token: token == end, timeout_seconds=120)
        status = channel.get_channel_status()
    console.print(
        f"committed in {time.monotonic() - started:.1f} s: offset token "
        f"{status.latest_committed_offset_token}, {status.rows_inserted} rows inserted on this channel"
    )
    _show(
        run_sql(
            settings,
            "SELECT source_file, COUNT(*) AS trips, MIN(trip_id) AS first_trip, MAX(trip_id) AS last_trip "
            "FROM trips GROUP BY source_file ORDER BY source_file",
        ),
        "SELECT source_file, COUNT(*) ... GROUP BY source_file",
    )


def print_console_link(settings: Settings) -> str | None:
    """Print a one-time sign-in link to the web console (as the admin, as `floe console` does);
    the link, or None when the API gave none."""
    from front.console import run_console

    link, note = run_console(settings, None, None, None)
    if link is None:
        console.print(f"[yellow]no web console link: {escape(note)}[/]")
        return None
    console.print("\n[bold]Web console[/]: open this link to watch the pipe, its files and the tables:")
    console.print(link, soft_wrap=True, markup=False, highlight=False)
    console.print(f"[dim]{escape(note)} Run `.venv/bin/floe console` for a new one.[/]")
    return link


def run_demo(settings: Settings, follow: bool = True, timeout: float = 180.0) -> int:
    """Run the demo; returns the process exit code."""
    try:
        with example_service() as service_url:
            return _run(settings, service_url, follow, timeout)
    except RuntimeError as exc:
        console.print(f"[red]{escape(str(exc))}[/red]")
        return 1
    except KeyboardInterrupt:
        return 0


def _run(settings: Settings, service_url: str, follow: bool, timeout: float) -> int:
    try:
        s3 = aws_client(settings.aws, "s3")
        s3.create_bucket(Bucket=BUCKET)
        for stmt in statements(service_url):
            console.print(f"[bold cyan]floe sql[/] {stmt}")
            run_sql(settings, stmt)
        files = [f"trips/2026/11/trips_{i}.csv" for i in range(1, 4)]
        for i, key in enumerate(files, start=1):
            s3.put_object(Bucket=BUCKET, Key=key, Body=sample_file(i))
            console.print(f"[green]put[/] s3://{BUCKET}/{key}")
        history_sql = (
            "SELECT FILE_NAME, STATUS, ROW_COUNT, ROW_PARSED, FIRST_ERROR_MESSAGE, FIRST_ERROR_LINE_NUMBER "
            "FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY(TABLE_NAME => 'trips', "
            "START_TIME => DATEADD(hours, -1, CURRENT_TIMESTAMP()))) ORDER BY FILE_NAME"
        )
        started = time.monotonic()
        with console.status("waiting for the pipe to load the files...") as status:
            while True:
                done = [
                    r for r in records(run_sql(settings, history_sql)) if r["STATUS"] != "Load in progress"
                ]
                status.update(f"waiting for the pipe: {len(done)}/{len(files)} files loaded")
                if len(done) >= len(files):
                    break
                if time.monotonic() - started > timeout:
                    console.print(
                        "[red]the demo files did not load in time.[/] Check `.floe/logs/pipeline.log` and "
                        "`.floe/logs/consumer.log`, and `make status`."
                    )
                    return 1
                time.sleep(0.5)
        console.print(f"loaded in {time.monotonic() - started:.1f} s")
        _show(run_sql(settings, history_sql), "COPY_HISTORY")
        _show(
            run_sql(
                settings,
                "SELECT city, COUNT(*) AS trips, SUM(fare) AS revenue, SUM(fare_usd) AS revenue_usd "
                "FROM trips GROUP BY city ORDER BY city",
            ),
            "SELECT city, COUNT(*), SUM(fare), SUM(fare_usd) FROM trips GROUP BY city "
            "(fare_usd: the pipe called to_usd, an external function)",
        )
        _show(run_sql(settings, "SELECT SYSTEM$PIPE_STATUS('demo_pipe')"), "SYSTEM$PIPE_STATUS")
        stream_demo(settings)
        _show(
            run_sql(
                settings,
                "SELECT city, sentiment('a great and fast ride in ' || city) AS mood FROM trips "
                "GROUP BY city ORDER BY city",
            ),
            "SELECT city, sentiment(...) FROM trips: an external function in a query",
        )
        print_console_link(settings)
        if not follow:
            return 0
        console.print(
            f"\nFloe is running. Drop CSV files into s3://{BUCKET}/trips/ "
            f"(endpoint {settings.aws.endpoint_url}), "
            'or query with `.venv/bin/floe sql "SELECT COUNT(*) FROM trips"`. Ctrl-C stops.'
        )
        seen = len(files)
        while True:
            time.sleep(2)
            rows = records(run_sql(settings, history_sql))
            for r in rows[seen:]:
                console.print(f"[green]{r['STATUS']}[/] {r['FILE_NAME']} rows={r['ROW_COUNT']}")
            seen = max(seen, len(rows))
    except (SqlFailed, StreamingError) as exc:
        console.print(f"[red]{escape(str(exc))}[/red]")
        return 1
    except KeyboardInterrupt:
        return 0
