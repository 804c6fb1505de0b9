"""The `floe` command: run SQL against the service, and run each Floe process."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table as RichTable

from floe.runtime import private_dir, private_files
from floe.settings import Settings
from front.client import SqlFailed, auth_header, run_sql

app = typer.Typer(
    help="Floe: a self-hosted Snowpipe. Declare pipes in Snowflake SQL; "
    "files dropped in S3 load exactly once.",
    no_args_is_help=True,
    add_completion=False,
)
err = Console(stderr=True)


def _print_table(body: dict[str, Any]) -> None:
    table = RichTable(show_lines=False)
    for col in body["columns"]:
        table.add_column(col, overflow="fold")
    for row in body["rows"]:
        table.add_row(*["NULL" if v is None else str(v) for v in row])
    Console().print(table)
    n = len(body["rows"])
    err.print(f"{n} row{'s' if n != 1 else ''}", style="dim")


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
        typer.Option("--json", help="Print a JSON array of row objects (an object with --profile)."),
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

    Supported: CREATE [OR REPLACE] STAGE | TABLE | PIPE, SHOW STAGES | TABLES | PIPES,
    DESC PIPE | TABLE | STAGE, DROP PIPE | TABLE | STAGE, ALTER PIPE ... SET PIPE_EXECUTION_PAUSED,
    ALTER PIPE p REFRESH [PREFIX = '...'] [MODIFIED_AFTER = '...'],
    SELECT over tables, TABLE(INFORMATION_SCHEMA.COPY_HISTORY(...)) and SYSTEM$PIPE_STATUS('p').
    A SELECT skips the blobs whose min/max statistics rule out its WHERE (comparisons of a column
    with a literal, and BETWEEN, joined by AND); --profile shows how many blobs it read.

    Namespaces and integrations: CREATE [OR REPLACE] DATABASE d | SCHEMA s, DROP, SHOW DATABASES |
    SCHEMAS; CREATE STORAGE INTEGRATION i ... STORAGE_ALLOWED_LOCATIONS = (...) (ACCOUNTADMIN),
    ALTER INTEGRATION i SET ... | UNSET ..., and CREATE STAGE ... STORAGE_INTEGRATION = i (the URL
    must lie in its allowed locations; every load checks again).

    External functions: CREATE API INTEGRATION i API_PROVIDER = ... API_ALLOWED_PREFIXES = (...)
    [API_BLOCKED_PREFIXES = (...)] [API_KEY = '...'] ENABLED = TRUE (ACCOUNTADMIN), ALTER [API]
    INTEGRATION; CREATE [OR REPLACE] [SECURE] EXTERNAL FUNCTION f(a TYPE, ...) RETURNS TYPE
    [VOLATILE | IMMUTABLE] API_INTEGRATION = i [HEADERS = (...)] [CONTEXT_HEADERS = (...)]
    [MAX_BATCH_ROWS = n] [COMPRESSION = ...] AS 'https://...'; SHOW EXTERNAL FUNCTIONS, DESC
    FUNCTION f(TYPE, ...), DROP FUNCTION f(TYPE, ...); SELECT f(col) FROM t calls the remote service.

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
    try:
        body = run_sql(settings, statement, user=user, key_file=private_key_file, role=role)
    except SqlFailed as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(1) from None
    stats = body.get("stats") or {}
    if as_json:
        records = [dict(zip(body["columns"], row, strict=True)) for row in body["rows"]]
        # The plain --json output stays a bare array: scripts already parse it.
        out: Any = {"rows": records, "profile": stats} if profile else records
        sys.stdout.write(json.dumps(out, default=str) + "\n")
    else:
        _print_table(body)
        if profile and "blobs_total" in stats:
            total, scanned = stats["blobs_total"], stats["blobs_scanned"]
            err.print(
                f"read {scanned} of {total} blob{'s' if total != 1 else ''} "
                f"({total - scanned} skipped by min/max statistics)",
                style="dim",
            )


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


def main() -> None:
    """Console-script entry point."""
    # Before anything is created: keys, logs, checkpoints and ready files must be owner-only.
    private_files()
    app()


if __name__ == "__main__":
    main()
