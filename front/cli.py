"""The `floe` command: run SQL against the service, and run each Floe process."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterable
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table as RichTable

from floe.catalog.names import Defaults
from floe.catalog.stage_commands import GetFiles, PutFiles, is_file_command, parse_file_command
from floe.errors import FloeError
from floe.runtime import private_dir, private_files
from floe.settings import Settings
from front.client import SqlFailed, auth_header, stream_sql
from front.progress import SqlProgress
from front.transfer import Caller, Outcome, get, put

app = typer.Typer(
    help="Floe: a self-hosted Snowpipe. Declare pipes in Snowflake SQL; "
    "files dropped in S3 load exactly once.",
    no_args_is_help=True,
    add_completion=False,
)
err = Console(stderr=True)


class _Output:
    """Prints a streamed answer as it comes: ``page`` for each page of rows, then ``end``."""

    def __init__(self, columns: list[str], profile: bool) -> None:
        self.columns = columns
        self.profile = profile
        self.rows = 0

    def page(self, rows: list[list[Any]]) -> None:
        raise NotImplementedError

    def end(self, stats: dict[str, Any]) -> None:
        """The answer is complete; ``stats`` is its trailer's."""
        raise NotImplementedError

    def cut(self) -> None:
        """The answer failed after its first line (the error is printed next, on stderr)."""


class _Tables(_Output):
    """A rich table per page, the header on the first; then the row count (and the profile) on stderr."""

    def __init__(self, columns: list[str], profile: bool) -> None:
        super().__init__(columns, profile)
        self.console = Console()

    def page(self, rows: list[list[Any]]) -> None:
        table = RichTable(show_lines=False, show_header=self.rows == 0)
        for col in self.columns:
            table.add_column(col, overflow="fold")
        for row in rows:
            table.add_row(*["NULL" if v is None else str(v) for v in row])
        self.console.print(table)
        self.rows += len(rows)

    def end(self, stats: dict[str, Any]) -> None:
        if self.rows == 0:
            self.page([])  # the header alone, as for any empty result
        err.print(f"{self.rows} row{'s' if self.rows != 1 else ''}", style="dim")
        if self.profile and "blobs_total" in stats:
            total, scanned = stats["blobs_total"], stats["blobs_scanned"]
            err.print(
                f"read {scanned} of {total} blob{'s' if total != 1 else ''} "
                f"({total - scanned} skipped by min/max statistics)",
                style="dim",
            )


class _Json(_Output):
    """The JSON array of row objects, written a page at a time (with --profile, inside
    ``{"rows": [...], "profile": {...}}``). The bytes are those ``json.dumps`` gives the whole
    value, so scripts parse the same output as before results streamed."""

    def __init__(self, columns: list[str], profile: bool) -> None:
        super().__init__(columns, profile)
        sys.stdout.write('{"rows": [' if profile else "[")

    def page(self, rows: list[list[Any]]) -> None:
        for row in rows:
            record = dict(zip(self.columns, row, strict=True))
            sys.stdout.write((", " if self.rows else "") + json.dumps(record, default=str))
            self.rows += 1
        sys.stdout.flush()

    def end(self, stats: dict[str, Any]) -> None:
        tail = f'], "profile": {json.dumps(stats, default=str)}}}' if self.profile else "]"
        sys.stdout.write(tail + "\n")
        sys.stdout.flush()

    def cut(self) -> None:
        sys.stdout.write("\n")  # ends the open array's line
        sys.stdout.flush()


def _print(
    answer: Iterable[dict[str, Any]], as_json: bool, profile: bool, progress: SqlProgress | None = None
) -> None:
    """Print a streamed answer (``stream_sql``) page by page, counting its rows on ``progress``. A
    failure (SqlFailed) leaves what came printed; a --json array then stays open, so a cut result
    never parses as a whole one."""
    out: _Output | None = None
    try:
        for item in answer:
            if progress is not None and out is not None and "success" not in item:
                progress.received(len(item["rows"]))
            with progress.paused() if progress is not None else contextlib.nullcontext():
                if out is None:
                    out = (_Json if as_json else _Tables)(item["columns"], profile)
                elif "success" in item:
                    out.end(item.get("stats") or {})
                else:
                    out.page(item["rows"])
    except SqlFailed:
        if out is not None:
            out.cut()
        raise


@app.command()
def sql(
    statement: Annotated[
        str,
        typer.Argument(
            help='Snowflake SQL, e.g. "SELECT COUNT(*) FROM t": one statement, or several separated by '
            "';' that run in order as one session (USE ROLE holds for the ones after it); the last one's "
            "result is printed."
        ),
    ],
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print a JSON array of row objects (an object with --profile), written as the rows "
            "arrive; if the statement fails midway, the array is left unclosed and the exit code is 1.",
        ),
    ] = False,
    profile: Annotated[
        bool,
        typer.Option(
            "--profile",
            help="Also report how many of the tables' blobs the query read (the rest were skipped by "
            "their min/max statistics): a line on stderr, or with --json the output "
            '{"rows": [...], "profile": {"blobs_total": N, "blobs_scanned": M}} '
            "(profile is {} for statements other than queries).",
        ),
    ] = False,
    user: Annotated[
        str | None,
        typer.Option(
            help="Run as this user instead of the admin (FLOE_AUTH__ADMIN_USER); needs --private-key-file."
        ),
    ] = None,
    private_key_file: Annotated[
        str | None,
        typer.Option(help="Unencrypted PEM private key whose public half is the user's RSA_PUBLIC_KEY[_2]."),
    ] = None,
    role: Annotated[
        str | None,
        typer.Option(
            help="Act as this role (as USE ROLE would; it must be granted to the user). Default: the user's "
            "DEFAULT_ROLE. It owns what the statements create."
        ),
    ] = None,
) -> None:
    """Run one statement against the running Floe service and print the result.

    Requests are signed with a key-pair JWT: by default as the admin user, with the key the API
    created in .floe/admin_rsa_key.p8 on its first start.

    The result is streamed: rows are printed page by page (FLOE_QUERY__PAGE_ROWS, 10,000) as the
    API sends them, a table per page, so a result of any size is printed (FLOE_QUERY__MAX_RESULT_ROWS
    bounds only unstreamed answers) within the query's time limit (FLOE_QUERY__TIMEOUT_S). If the
    statement fails midway, the rows printed stay, the error follows and the exit code is 1.

    Supported: CREATE [OR REPLACE] STAGE | TABLE | PIPE, SHOW STAGES | TABLES | PIPES,
    DESC PIPE | TABLE | STAGE, DROP PIPE | TABLE | STAGE, ALTER PIPE ... SET PIPE_EXECUTION_PAUSED,
    ALTER PIPE p REFRESH [PREFIX = '...'] [MODIFIED_AFTER = '...'],
    SELECT over tables, TABLE(INFORMATION_SCHEMA.COPY_HISTORY(...)) and SYSTEM$PIPE_STATUS('p').
    A SELECT skips the blobs whose min/max statistics rule out its WHERE (comparisons of a column
    with a literal, and BETWEEN, joined by AND); --profile shows how many blobs it read.

    Namespaces and integrations: CREATE [OR REPLACE] DATABASE d | SCHEMA s, DROP, SHOW DATABASES |
    SCHEMAS; CREATE STORAGE INTEGRATION i ... STORAGE_ALLOWED_LOCATIONS = (...) (ACCOUNTADMIN),
    ALTER INTEGRATION i SET ... | UNSET ..., and CREATE STAGE ... STORAGE_INTEGRATION = i (the URL
    must lie in its allowed locations; every load checks again). ALTER STAGE s SET URL = '...' |
    STORAGE_INTEGRATION = i | FILE_FORMAT = (...) | COMMENT = '...'; a pipe whose stage or table is
    dropped, replaced or moved stops (SYSTEM$PIPE_STATUS: STOPPED_*) until CREATE OR REPLACE PIPE.

    Tables: ALTER TABLE t ADD [COLUMN] [IF NOT EXISTS] c type [NOT NULL] | DROP [COLUMN] [IF EXISTS]
    c | RENAME COLUMN c TO d | ALTER [COLUMN] c DROP NOT NULL | SET ENABLE_SCHEMA_EVOLUTION = TRUE |
    FALSE (the table's owner); with it, loads using MATCH_BY_COLUMN_NAME add the columns files bring.
    SELECT * FROM TABLE(INFER_SCHEMA(LOCATION => '@s/path', FILE_FORMAT => 'f')) reads staged files'
    columns (CSV with PARSE_HEADER = TRUE, JSON, Parquet, Avro, ORC); CREATE TABLE t USING TEMPLATE
    (SELECT ARRAY_AGG(OBJECT_CONSTRUCT(*)) FROM TABLE(INFER_SCHEMA(...))) makes a table of them.

    External functions: CREATE API INTEGRATION i API_PROVIDER = ... API_ALLOWED_PREFIXES = (...)
    [API_BLOCKED_PREFIXES = (...)] [API_KEY = '...'] ENABLED = TRUE (ACCOUNTADMIN), ALTER [API]
    INTEGRATION; CREATE [OR REPLACE] [SECURE] EXTERNAL FUNCTION f(a TYPE, ...) RETURNS TYPE
    [VOLATILE | IMMUTABLE] API_INTEGRATION = i [HEADERS = (...)] [CONTEXT_HEADERS = (...)]
    [MAX_BATCH_ROWS = n] [COMPRESSION = ...] AS 'https://...'; SHOW EXTERNAL FUNCTIONS, DESC
    FUNCTION f(TYPE, ...), DROP FUNCTION f(TYPE, ...); SELECT f(col) FROM t calls the remote service.

    Error notifications and backfill: CREATE NOTIFICATION INTEGRATION i TYPE = QUEUE DIRECTION =
    OUTBOUND NOTIFICATION_PROVIDER = AWS_SNS AWS_SNS_TOPIC_ARN = '...' ENABLED = TRUE (ACCOUNTADMIN),
    ALTER | SHOW | DESC | DROP [NOTIFICATION] INTEGRATION; CREATE PIPE p ERROR_INTEGRATION = i (failed
    files go to the SNS topic) BACKFILL_INTERVAL = '10 MINUTES' (list the stage for missed files).

    Internal stages: CREATE STAGE s [FILE_FORMAT = (...)] [COMMENT = '...'] (no URL), every
    table's stage @%t, and your own user stage @~ (yours alone; pipes do not read it).
    PUT file:///dir/*.csv @s\\[/path] [AUTO_COMPRESS = TRUE | FALSE] [OVERWRITE =
    TRUE | FALSE] [PARALLEL = n] [SOURCE_COMPRESSION = ...] and GET @s\\[/path] file:///dir/
    [PATTERN = '...'] [PARALLEL = n] run here, on the client, as SnowSQL runs them (alone, not with
    other statements; see floe put --help, floe get --help). LIST @s\\[/path] [PATTERN = '...'] and
    REMOVE @s\\[/path] [PATTERN = '...'] (LS, RM) list and delete the files of internal and external
    stages.

    Access control (every statement checks the privileges Snowflake's would; README, "Access control"):
    CREATE [OR REPLACE] USER u [RSA_PUBLIC_KEY = '...'] [DEFAULT_ROLE = r], ALTER USER, DROP USER
    CREATE [OR REPLACE] ROLE r, DROP ROLE r, GRANT ROLE r TO USER u | TO ROLE r2 (and REVOKE)
    GRANT priv | ALL | OWNERSHIP ON ACCOUNT | DATABASE d | SCHEMA s | TABLE t | STAGE s | PIPE p |
    INTEGRATION i | FUNCTION f(TYPE, ...) TO ROLE r; ON ALL | FUTURE TABLES IN SCHEMA s (and REVOKE)
    SHOW USERS | ROLES, SHOW GRANTS TO ROLE r | TO USER u | OF ROLE r | ON <kind> <name>, DESC USER u
    USE ROLE r, USE SECONDARY ROLES ALL | NONE
    """
    settings = Settings()
    if user is not None and private_key_file is None:
        err.print("[red]--user needs --private-key-file (the PEM key registered for that user)[/red]")
        raise typer.Exit(2)
    transfer = _transfer_statement(settings, statement)
    if transfer is not None:  # PUT and GET run here, on the client, as SnowSQL runs them
        _run_transfer(transfer, Caller(settings, user, private_key_file, role), as_json)
        return
    # Closed however printing ends, so the API stops the query of an answer left unread.
    # On a terminal, a spinner on stderr while the statement runs, then the rows received so far.
    with (
        contextlib.closing(
            stream_sql(settings, statement, user=user, key_file=private_key_file, role=role)
        ) as answer,
        SqlProgress(err, statement) as progress,
    ):
        try:
            _print(answer, as_json, profile, progress)
        except SqlFailed as exc:
            err.print(f"[red]{escape(str(exc))}[/red]")
            raise typer.Exit(1) from None


def _transfer_statement(settings: Settings, statement: str) -> PutFiles | GetFiles | None:
    """The PUT or GET that ``statement`` is, or None for any other statement. PUT and GET run
    alone: mixed with other statements they are refused (exit 2)."""
    from services.sql import statements  # the API's own split at semicolons outside strings

    try:
        texts = [t.strip() for t in statements(statement)]
    except FloeError:
        return None  # the API will say what is wrong with it
    transfers = [t for t in texts if is_file_command(t) and t[:3].upper() in ("PUT", "GET")]
    if not transfers:
        return None
    if len(texts) > 1:
        err.print("[red]PUT and GET run alone: send them without other statements[/red]")
        raise typer.Exit(2)
    try:
        parsed = parse_file_command(transfers[0], Defaults(settings.database, settings.schema_name))
    except FloeError as exc:
        err.print(f"[red]{escape(exc.message)}[/red]")
        raise typer.Exit(1) from None
    return parsed if isinstance(parsed, PutFiles | GetFiles) else None


class _Bars:
    """A rich progress bar per file being moved, and one for all of them, on stderr."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.total = progress.add_task("total", total=0)
        self.tasks: dict[str, TaskID] = {}

    def start(self, name: str, total: int) -> None:
        self.tasks[name] = self.progress.add_task(name, total=total)
        known = self.progress.tasks[self.total].total or 0
        self.progress.update(self.total, total=known + total)

    def advance(self, name: str, n: int) -> None:
        self.progress.advance(self.tasks[name], n)
        self.progress.advance(self.total, n)

    def done(self, name: str) -> None:
        task = self.tasks.pop(name, None)
        if task is not None:
            self.progress.remove_task(task)


def _run_transfer(statement: PutFiles | GetFiles, caller: Caller, as_json: bool) -> None:
    """Run a PUT or GET with a progress bar, print its rows as ``floe sql`` prints a result; exit 1
    if a file failed (its row says why)."""
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
        # Off a terminal, rich would still end with a blank line on stderr; scripts get nothing.
        disable=not err.is_terminal,
    )
    try:
        with progress:
            bars = _Bars(progress)
            outcome: Outcome = (
                put(statement, caller, bars)
                if isinstance(statement, PutFiles)
                else get(statement, caller, bars)
            )
    except SqlFailed as exc:
        err.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(1) from None
    answer: list[dict[str, Any]] = [
        {"columns": outcome.columns},
        {"rows": outcome.rows},
        {"success": True, "stats": {}},
    ]
    _print(answer, as_json, profile=False)
    if outcome.failed:
        raise typer.Exit(1)


_AsJson = Annotated[bool, typer.Option("--json", help="Print the rows as a JSON array of objects.")]
_User = Annotated[
    str | None,
    typer.Option(
        help="Run as this user instead of the admin (FLOE_AUTH__ADMIN_USER); needs --private-key-file."
    ),
]
_KeyFile = Annotated[
    str | None,
    typer.Option(help="Unencrypted PEM private key whose public half is the user's RSA_PUBLIC_KEY[_2]."),
]
_Role = Annotated[str | None, typer.Option(help="Act as this role (it must be granted to the user).")]


def _statement_of(verb: str, first: str, second: str, options: list[str] | None) -> str:
    """The PUT or GET statement the command line spells (the shell took its quotes away)."""

    def quoted(word: str) -> str:
        return word if not any(c.isspace() for c in word) else "'" + word.replace("'", "''") + "'"

    return " ".join([verb, quoted(first), quoted(second), *(options or [])])


@app.command("put")
def put_files(
    source: Annotated[
        str,
        typer.Argument(
            help="The local files: file:///abs/dir/name.csv, or a glob in the file name such as "
            "'file:///tmp/data/*.csv' (quote it for the shell; * and ? only in the file name). "
            "A path without file:// is taken as one, relative to the working directory."
        ),
    ],
    stage: Annotated[
        str,
        typer.Argument(
            help="The internal stage and path: @my_stage, @my_stage/some/path, @db.schema.my_stage, "
            "a table's stage @%my_table, or your user stage @~."
        ),
    ],
    options: Annotated[
        list[str] | None,
        typer.Argument(
            help="PUT's options, as in SQL: AUTO_COMPRESS = TRUE | FALSE (default TRUE: gzip files "
            "that are not compressed yet, adding .gz), OVERWRITE = TRUE | FALSE (default FALSE: a "
            "file whose name is already on the stage is SKIPPED), PARALLEL = 1..99 (files at once, "
            "default 4), SOURCE_COMPRESSION = AUTO_DETECT | GZIP | BZ2 | BROTLI | ZSTD | DEFLATE | "
            "RAW_DEFLATE | NONE (default AUTO_DETECT, by extension and first bytes)."
        ),
    ] = None,
    as_json: _AsJson = False,
    user: _User = None,
    private_key_file: _KeyFile = None,
    role: _Role = None,
) -> None:
    """Upload local files to an internal stage (Snowflake's PUT), with a progress bar.

    The files go through the Floe API (no S3 credentials needed), which encrypts each one under
    Floe's key as it arrives; it needs WRITE on the stage (or OWNERSHIP of the table, for @%t;
    your own user stage @~ needs nothing).
    Prints one row per file: source, target, source_size, target_size, source_compression,
    target_compression, status (UPLOADED, SKIPPED, or ERROR with the reason in message), message.
    Exit code 1 if a file failed. Files above FLOE_STAGES__MAX_FILE_BYTES (5 GiB) are refused.

    Example: floe put 'file:///tmp/data/*.csv' @my_stage/2026/ OVERWRITE = TRUE PARALLEL = 8
    """
    _command_transfer("PUT", _file_uri(source), stage, options, as_json, user, private_key_file, role)


@app.command("get")
def get_files(
    stage: Annotated[
        str,
        typer.Argument(
            help="The internal stage and path to download: @my_stage\\[/path], @%my_table\\[/path] or "
            "your user stage @~"
        ),
    ],
    target: Annotated[
        str,
        typer.Argument(
            help="The local directory: file:///tmp/out/ (created if missing). Files land there by "
            "their names, without the stage's folders."
        ),
    ],
    options: Annotated[
        list[str] | None,
        typer.Argument(
            help="GET's options, as in SQL: PATTERN = '<regex>' (RE2, matched against the whole name "
            "LIST shows, such as my_stage/a/b.csv.gz; quote it for the shell), PARALLEL = 1..99 "
            "(files at once, default 10)."
        ),
    ] = None,
    as_json: _AsJson = False,
    user: _User = None,
    private_key_file: _KeyFile = None,
    role: _Role = None,
) -> None:
    """Download the files of an internal stage (Snowflake's GET), decrypted, with a progress bar.

    Needs READ on the stage (or OWNERSHIP of the table, for @%t; nothing for your @~). Each file is
    written whole or not at all. Prints one row per file: file, size, status (DOWNLOADED, or ERROR
    with the reason in message), message. Two files of one name in different folders are refused,
    as in Snowflake.

    Example: floe get @my_stage/2026/ file:///tmp/out/ "PATTERN = '.*[.]csv[.]gz'"
    """
    _command_transfer("GET", stage, _file_uri(target), options, as_json, user, private_key_file, role)


def _file_uri(word: str) -> str:
    return word if word.lower().startswith("file://") else "file://" + word


def _command_transfer(
    verb: str,
    first: str,
    second: str,
    options: list[str] | None,
    as_json: bool,
    user: str | None,
    private_key_file: str | None,
    role: str | None,
) -> None:
    settings = Settings()
    if user is not None and private_key_file is None:
        err.print("[red]--user needs --private-key-file (the PEM key registered for that user)[/red]")
        raise typer.Exit(2)
    statement = _transfer_statement(settings, _statement_of(verb, first, second, options))
    assert statement is not None  # the text starts with PUT or GET
    _run_transfer(statement, Caller(settings, user, private_key_file, role), as_json)


@app.command()
def token(
    user: Annotated[
        str | None,
        typer.Option(
            help="Sign as this user instead of the admin (FLOE_AUTH__ADMIN_USER); needs --private-key-file."
        ),
    ] = None,
    private_key_file: Annotated[
        str | None,
        typer.Option(help="Unencrypted PEM private key whose public half is the user's RSA_PUBLIC_KEY[_2]."),
    ] = None,
) -> None:
    """Print a key-pair JWT (valid for an hour) for curl or any HTTP client: send it as
    'Authorization: Bearer <token>' with 'X-Snowflake-Authorization-Token-Type: KEYPAIR_JWT'."""
    if user is not None and private_key_file is None:
        raise typer.BadParameter(
            "--user needs --private-key-file (the admin's key is the default only for the admin)"
        )
    try:
        header = auth_header(Settings(), user, private_key_file)
    except SqlFailed as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from None
    typer.echo(header["Authorization"].removeprefix("Bearer "))


@app.command("console")
def console_link(user: _User = None, private_key_file: _KeyFile = None, role: _Role = None) -> None:
    """Print a one-time link that signs a browser in to the web console (/console on the API) as
    the admin, or as --user with --private-key-file (and --role). Open it within a minute and press
    Sign in on its page; it works once. The console then shows and does what that user may."""
    from front.console import run_console

    if user is not None and private_key_file is None:
        err.print("[red]--user needs --private-key-file (the PEM key registered for that user)[/red]")
        raise typer.Exit(2)
    link, note = run_console(Settings(), user, private_key_file, role)
    if link is None:
        err.print(f"[red]{escape(note)}[/red]")
        raise typer.Exit(1)
    typer.echo(link)
    err.print(note, style="dim")


def _process_settings() -> Settings:
    """Settings of a long-running Floe process, whose state directory is made owner-only (0700)."""
    settings = Settings()
    private_dir(settings.state_dir)
    return settings


@app.command()
def api() -> None:
    """Run the HTTP API (Snowpipe REST, SQL endpoint, health, metrics) on FLOE_API__HOST:FLOE_API__PORT."""
    from services.api import serve

    serve(_process_settings())


@app.command()
def consumer() -> None:
    """Run an SQS consumer: S3 notifications -> dedup -> pipe queues. Several may run at once."""
    from services.consumer import main as consumer_main

    consumer_main(_process_settings())


@app.command()
def pipeline() -> None:
    """Run the Spark Structured Streaming job that loads queued files into tables."""
    from pipeline.job import run

    run(_process_settings())


@app.command()
def demo(
    follow: Annotated[bool, typer.Option(help="Keep showing new loads until Ctrl-C.")] = True,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the demo files to load.")] = 180.0,
) -> None:
    """Create a demo stage, table and auto-ingest pipe, drop sample files, and show them loaded."""
    from front.demo import run_demo

    raise typer.Exit(run_demo(Settings(), follow=follow, timeout=timeout))


@app.command()
def status(
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help='Print one JSON object instead: {"taken", "api": {"url", "reachable", "ready", '
            '"detail"}, "pipes": [{"name", "state", "pending", "oldest_pending", "last_ingested", '
            '"loaded_last_hour", "rows_last_hour", "failed_last_hour", "per_minute", "last_error", '
            '"unavailable"}], "error"}; with --watch, one such line per refresh.',
        ),
    ] = False,
    watch: Annotated[
        bool, typer.Option("--watch", help="Refresh every --interval seconds until Ctrl-C.")
    ] = False,
    interval: Annotated[float, typer.Option(min=0.5, help="Seconds between refreshes with --watch.")] = 2.0,
    like: Annotated[
        str | None, typer.Option(help="Only the pipes whose name matches, as SHOW PIPES LIKE '<pattern>'.")
    ] = None,
    user: _User = None,
    private_key_file: _KeyFile = None,
    role: _Role = None,
) -> None:
    """Show the pipes' state, like the web console's front page: per pipe its executionState,
    pending files (and the oldest one's age), files and rows loaded in the last hour with a
    files-per-minute sparkline, failed files, the last load and the last error (the pipe's own,
    or its last file error with line and column). Above the table, whether the API answers.

    Everything comes through the SQL endpoint as the user (SHOW PIPES, SYSTEM$PIPE_STATUS,
    COPY_HISTORY), so it shows the pipes the user's roles may see; a figure the user may not read
    is left out, saying why. Exit code 1 when the pipes could not be listed (the API unreachable).
    `make status` shows the local processes instead.
    """
    from front.status import status_command

    if user is not None and private_key_file is None:
        err.print("[red]--user needs --private-key-file (the PEM key registered for that user)[/red]")
        raise typer.Exit(2)
    code = status_command(
        Settings(),
        as_json=as_json,
        watch=watch,
        interval=interval,
        like=like,
        user=user,
        key_file=private_key_file,
        role=role,
    )
    raise typer.Exit(code)


def main() -> None:
    """Console-script entry point."""
    # Before anything is created: keys, logs, checkpoints and ready files must be owner-only.
    private_files()
    app()


if __name__ == "__main__":
    main()
