"""The web console in a real browser (Debian's chromium, driven by Playwright for Python) against
the running stack: sign in through the link the real `floe console` prints (its page, then its
button), watch a staged file appear in a pipe's history, filter to the failed one and read where
it failed, pause and resume the pipe with its buttons; then the channels, tables and SQL pages.
Nothing is created in the browser: the pipe and its files come from SQL and S3, as a user's would.

Each page is photographed; with ``CONSOLE_SCREENSHOTS=docs/console`` the pictures replace the ones
the README shows (otherwise they go to the test's temporary directory, so a test run leaves the
checkout as it was).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from bench.harness import unique
from tests.conftest import ROOT, Stack

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
"""Debian's chromium (`make chromium-install`); Playwright's own browser download is not used."""
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LOAD_TIMEOUT_MS = 180_000
"""A file reaches the history within a micro-batch or two of the Spark job; generous for a busy box."""
PAGE_TIMEOUT_MS = 20_000
"""What a page's live part takes to show a change it polls for (once a second)."""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: run `make chromium-install` (make test does)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def pages(browser: Browser) -> Iterator[Callable[..., Page]]:
    """New pages, closed after the test: a page left open keeps polling the stack's API, a failed
    test's included, and would slow every later test's pages."""
    opened: list[Page] = []

    def new_page(**options: Any) -> Page:
        opened.append(browser.new_page(**options))
        return opened[-1]

    yield new_page
    for page in opened:
        page.close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    where = os.environ.get("CONSOLE_SCREENSHOTS")
    path = (ROOT / where) if where else tmp_path / "console"
    path.mkdir(parents=True, exist_ok=True)
    return path


def floe_console(stack: Stack) -> str:
    """The link `floe console` prints, run as a user runs it (as the stack's admin)."""
    done = stack.cli("console")
    assert done.returncode == 0, done.stderr
    link = done.stdout.strip()
    assert re.fullmatch(r"https?://[^\s]+/console/signin\?code=[\w-]{40,}", link), link
    assert "works once" in done.stderr
    return link


def make_pipe(stack: Stack, bucket: str) -> tuple[str, str]:
    stage, table, pipe = unique("st_"), unique("trips_"), unique("trips_pipe_")
    stack.sql(
        f"CREATE STAGE {stage} URL = 's3://{bucket}/in/' STORAGE_INTEGRATION = floe_tests "
        "FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1)"
    )
    stack.sql(f"CREATE TABLE {table} (trip_id INT NOT NULL, city VARCHAR, fare NUMBER(10,2))")
    stack.sql(f"CREATE PIPE {pipe} AUTO_INGEST = TRUE AS COPY INTO {table} FROM @{stage}")
    return table.upper(), pipe.upper()


def pipe_state(stack: Stack, pipe: str) -> str:
    (row,) = stack.sql(f"SELECT SYSTEM$PIPE_STATUS('{pipe}') AS s")
    return str(json.loads(row["S"])["executionState"])


def stream_rows(stack: Stack, table: str) -> None:
    """A few rows through the table's default streaming pipe, so the channels page has one."""
    from floe.streaming import StreamingIngestClient
    from floe.tls import api_base_url

    properties: dict[str, Any] = {
        "url": api_base_url(stack.settings),
        "account": stack.settings.account,
        "user": stack.settings.auth.admin_user,
        "private_key_file": stack.settings.auth.admin_key_file,
        "max_client_lag": 200,
    }
    with StreamingIngestClient(
        "console", "FLOE", "PUBLIC", f"{table}-STREAMING", properties=properties
    ) as client:
        channel, _ = client.open_channel("taxi-feed-1")
        rows = [{"trip_id": 9000 + i, "city": "OSLO", "fare": f"{7 + i}.25"} for i in range(25)]
        channel.append_rows(rows, start_offset_token="1", end_offset_token="25")
        channel.wait_for_commit(lambda token: token == "25", timeout_seconds=120)


def test_the_console_shows_a_load_and_pauses_and_resumes_a_pipe(
    stack: Stack, bucket: str, s3: Any, pages: Callable[..., Page], shots: Path
) -> None:
    table, pipe = make_pipe(stack, bucket)
    page = pages(viewport={"width": 1360, "height": 820})
    failures: list[str] = []
    page.on("pageerror", lambda error: failures.append(str(error)))

    # Sign in through the link the real CLI prints: its page says as whom, its button signs in, and
    # the address bar ends up without the code.
    page.goto(floe_console(stack))
    expect(page.locator("#signin-user")).to_have_text(stack.settings.auth.admin_user)
    page.screenshot(path=str(shots / "signin.png"), full_page=True)
    page.click("#signin-button")
    expect(page).to_have_url(re.compile(r"/console$"), timeout=PAGE_TIMEOUT_MS)
    expect(page.locator("#user")).to_have_text(stack.settings.auth.admin_user)
    row = page.locator(f'tr[data-pipe="FLOE.PUBLIC.{pipe}"]')
    expect(row.locator("[data-state]")).to_have_text("RUNNING", timeout=PAGE_TIMEOUT_MS)

    # A good and a bad file into the pipe's stage, then its history page (through its link).
    s3.put_object(
        Bucket=bucket, Key="in/2026/good.csv", Body=b"trip_id,city,fare\n1,berlin,12.50\n2,rome,8.00\n"
    )
    s3.put_object(Bucket=bucket, Key="in/2026/bad.csv", Body=b"trip_id,city,fare\n3,oslo,4.00\n4,paris,n/a\n")
    row.get_by_role("link", name=pipe).click()
    expect(page.locator("#pipe-name")).to_have_text(f"FLOE.PUBLIC.{pipe}")
    good = page.locator('tr.file[data-file="2026/good.csv"]')
    expect(good.locator(".badge")).to_have_text("Loaded", timeout=LOAD_TIMEOUT_MS)
    expect(page.locator('tr.file[data-file="2026/bad.csv"] .badge')).to_have_text(
        "Load failed", timeout=LOAD_TIMEOUT_MS
    )
    page.screenshot(path=str(shots / "history.png"), full_page=True)

    # Only the failed file, by status and then by a search in another case: its error, line, column.
    page.select_option("#status", "Load failed")
    expect(page.locator("tr.file")).to_have_count(1, timeout=PAGE_TIMEOUT_MS)
    page.fill("#q", "BAD")
    expect(page.locator("#matched")).to_have_text("1 file match", timeout=PAGE_TIMEOUT_MS)
    failed = page.locator('tr.detail[data-error-for="2026/bad.csv"]')
    expect(failed.locator(".error-text")).to_contain_text("n/a")
    expect(failed.locator(".err-line")).to_have_text("3")
    expect(failed.locator(".err-column")).to_have_text(f'"{table}"["FARE":3]')
    history = stack.sql(
        "SELECT FIRST_ERROR_LINE_NUMBER AS line, FIRST_ERROR_CHARACTER_POS AS ch FROM TABLE("
        f"INFORMATION_SCHEMA.COPY_HISTORY(TABLE_NAME => '{table}', START_TIME => DATEADD(HOUR, -1, "
        "CURRENT_TIMESTAMP()))) WHERE FILE_NAME = '2026/bad.csv'"
    )
    expect(failed.locator(".err-char")).to_have_text(str(history[0]["CH"]))
    assert history[0]["LINE"] == 3
    page.fill("#q", "good")
    expect(page.locator(".empty")).to_contain_text("No files match", timeout=PAGE_TIMEOUT_MS)
    page.fill("#q", "bad")
    expect(page.locator("tr.file")).to_have_count(1, timeout=PAGE_TIMEOUT_MS)
    page.screenshot(path=str(shots / "history-filtered.png"), full_page=True)

    # Pause and resume with the pipes page's buttons; SYSTEM$PIPE_STATUS agrees after each.
    page.get_by_role("link", name="Pipes").click()
    expect(row.locator(".spark-total").first).to_contain_text("1", timeout=PAGE_TIMEOUT_MS)
    row.locator('button[data-action="pause"]').click()
    expect(page.locator("#flash")).to_contain_text(f"Pipe FLOE.PUBLIC.{pipe} paused.")
    assert pipe_state(stack, pipe) == "PAUSED"
    expect(row.locator("[data-state]")).to_have_text("PAUSED", timeout=PAGE_TIMEOUT_MS)
    row.locator('button[data-action="resume"]').click()
    expect(page.locator("#flash")).to_contain_text(f"Pipe FLOE.PUBLIC.{pipe} resumed.")
    assert pipe_state(stack, pipe) == "RUNNING"
    expect(row.locator("[data-state]")).to_have_text("RUNNING", timeout=PAGE_TIMEOUT_MS)
    page.locator("#flash").evaluate("flash => flash.replaceChildren()")
    expect(row.locator("canvas")).to_have_count(2)  # the two sparklines, drawn by uPlot
    page.screenshot(path=str(shots / "pipes.png"), full_page=True)

    # Channels: a client streams into the table; the page shows its offset token within a second.
    stream_rows(stack, table)
    page.get_by_role("link", name="Channels").click()
    channel = page.locator(f'[data-table="FLOE.PUBLIC.{table}"] tr[data-channel="taxi-feed-1"]')
    expect(channel).to_contain_text("25", timeout=PAGE_TIMEOUT_MS)
    page.screenshot(path=str(shots / "channels.png"), full_page=True)

    # Tables: the rows of the good file and the stream, and a sample of them.
    page.goto(page.url.replace("/console/channels", f"/console/tables?db=FLOE&schema=PUBLIC&name={table}"))
    listed = page.locator(f'#tables tr[data-table="FLOE.PUBLIC.{table}"]')
    expect(listed.locator("td.num").first).to_have_text("27", timeout=PAGE_TIMEOUT_MS)
    expect(page.locator("#sample table.grid tbody tr")).to_have_count(10)
    page.screenshot(path=str(shots / "tables.png"), full_page=True)

    # The SQL box runs as the user and shows an error as `floe sql` prints it.
    page.get_by_role("link", name="SQL").click()
    page.fill(
        "#sql", f"SELECT city, COUNT(*) AS trips, SUM(fare) AS fares FROM {table} GROUP BY city ORDER BY city"
    )
    page.click("#run")
    expect(page.locator("#sql-count")).to_contain_text("3 rows")
    page.fill("#sql", "SELECT * FROM no_such_table")
    page.keyboard.press("Control+Enter")
    expect(page.locator("#sql-error")).to_contain_text("does not exist or not authorized")
    page.fill(
        "#sql", f"SELECT city, COUNT(*) AS trips, SUM(fare) AS fares FROM {table} GROUP BY city ORDER BY city"
    )
    page.click("#run")
    expect(page.locator("#sql-count")).to_contain_text("3 rows")
    page.screenshot(path=str(shots / "sql.png"), full_page=True)

    # Signing out ends the session: the console sends the browser to the page that says what to run.
    page.click("#signout")
    expect(page.locator("#signed-out")).to_contain_text("floe console")
    page.goto(page.url.split("/console")[0] + "/console")
    expect(page.locator("#signed-out")).to_contain_text("You are not signed in.")
    assert failures == []


def test_the_link_the_demo_prints_signs_in_as_the_admin(stack: Stack, pages: Callable[..., Page]) -> None:
    from front.demo import print_console_link  # what `make run` prints at the end of its demo

    link = print_console_link(stack.settings)
    assert link is not None
    page = pages()
    page.goto(link)
    page.click("#signin-button")
    expect(page).to_have_url(re.compile(r"/console$"), timeout=PAGE_TIMEOUT_MS)
    expect(page.locator("#user")).to_have_text(stack.settings.auth.admin_user)


def test_a_link_opened_from_another_site_signs_in_only_with_its_button(
    stack: Stack, pages: Callable[..., Page]
) -> None:
    """A page of another site that sends the browser to a sign-in link (a link, a redirect or an
    image) leaves it signed out and the code unused; the user's own click on the sign-in page
    still works (issue 31, item 11)."""
    link = floe_console(stack)
    base = link.split("/console/")[0]
    page = pages()
    # Another site's page: an image and a redirect to the link (served from a data: URL, so its
    # requests are cross-site to the API).
    page.goto(f'data:text/html,<img src="{link}"><meta http-equiv="refresh" content="0; url={link}">')
    expect(page.locator("#signin-user")).to_have_text(stack.settings.auth.admin_user, timeout=PAGE_TIMEOUT_MS)
    page.goto(f"{base}/console")
    expect(page.locator("#signed-out")).to_contain_text("You are not signed in.")
    # The link still works, once, with its page's button.
    page.goto(link)
    page.click("#signin-button")
    expect(page).to_have_url(re.compile(r"/console$"), timeout=PAGE_TIMEOUT_MS)
    expect(page.locator("#user")).to_have_text(stack.settings.auth.admin_user)
