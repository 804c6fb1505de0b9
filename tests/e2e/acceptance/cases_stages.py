"""Stopped pipes (issue 16, helper J; decision 84) as acceptance cases: once its file has loaded,
each case drops, replaces or alters the stage or table its pipe was created on and reads the
executionState SYSTEM$PIPE_STATUS reports; one recreates the pipe and finds it running again.

Each case's ``query`` runs after its file loaded: the statement that changes an object comes first,
then the SELECT that shows its effect (``floe sql`` runs them as one session, answering with the
last). The statements are written to run again harmlessly (IF EXISTS, OR REPLACE). GRANT on stages
by kind and user stages (``@~``) load no file through a pipe, so they are tested apart:
tests/services/test_stage_grants.py and tests/services/test_user_stages.py."""

from __future__ import annotations

from tests.e2e.acceptance.case import Case

DOCS = "https://docs.snowflake.com/en/"
PST = f"[PST] {DOCS}sql-reference/functions/system_pipe_status"
CST = f"{DOCS}sql-reference/sql/create-stage"
AST = f"{DOCS}sql-reference/sql/alter-stage"
TS = f"{DOCS}user-guide/data-load-snowpipe-ts"
MANAGE = f"{DOCS}user-guide/data-load-snowpipe-manage"

CSV = "FROM @{stage} FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1)"
GOOD = b"id,amount\n1,1.5\n2,2.5\n"
LOADED = {"STATUS": "Loaded", "ROW_COUNT": 2, "ERROR_COUNT": 0}
STAGE = "STAGE {stage} URL = 's3://{bucket}/{prefix}' STORAGE_INTEGRATION = floe_tests"
"""The case's stage as the runner creates it (CREATE ... again makes another stage of the name)."""


def _state_is(state: str) -> str:
    """A SELECT that is TRUE when SYSTEM$PIPE_STATUS's executionState is ``state``."""
    return f"""SELECT SYSTEM$PIPE_STATUS('{{pipe}}') LIKE '%"executionState":"{state}"%' AS has"""


CASES = [
    Case(
        id="stages_dropped_stage_stops_the_pipe",
        source=(
            f"{PST} (executionState STOPPED_STAGE_DROPPED); {TS} (Pipe execution states: "
            '"The stage or the notification integration that the pipe references was dropped or '
            'replaced")'
        ),
        columns="id INT, amount NUMBER(10,2)",
        copy=CSV,
        files={"drop.csv": GOOD},
        rows=[(True,)],
        query="DROP STAGE IF EXISTS {stage}; " + _state_is("STOPPED_STAGE_DROPPED"),
        history={"drop.csv": LOADED},
    ),
    Case(
        id="stages_replaced_stage_stops_the_pipe",
        source=(
            f'{CST} (usage notes on CREATE OR REPLACE: "Any pipes that reference the stage stop loading '
            'data. The execution status of the pipes changes to STOPPED_STAGE_DROPPED."), even when the '
            "new stage has the old one's URL"
        ),
        columns="id INT, amount NUMBER(10,2)",
        copy=CSV,
        files={"replace.csv": GOOD},
        rows=[(True,)],
        query=f"CREATE OR REPLACE {STAGE}; " + _state_is("STOPPED_STAGE_DROPPED"),
        history={"replace.csv": LOADED},
    ),
    Case(
        id="stages_altered_stage_url_stops_the_pipe",
        source=(
            f"{AST} (ALTER STAGE ... SET URL = '...'); {TS} (STOPPED_STAGE_ALTERED: \"The URL of the stage "
            f'that the pipe references changed"); {MANAGE} ("if you need to modify any of the cloud '
            'parameters of the referenced stage, you must recreate the pipe")'
        ),
        columns="id INT, amount NUMBER(10,2)",
        copy=CSV,
        files={"alter.csv": GOOD},
        rows=[(True,)],
        query=(
            "ALTER STAGE {stage} SET URL = 's3://{bucket}/{prefix}moved/'; "
            + _state_is("STOPPED_STAGE_ALTERED")
        ),
        history={"alter.csv": LOADED},
    ),
    Case(
        id="stages_dropped_table_stops_the_pipe",
        source=f'{PST} (STOPPED_MISSING_TABLE: "the target table defined in the pipe definition is dropped")',
        columns="id INT, amount NUMBER(10,2)",
        copy=CSV,
        files={"table.csv": GOOD},
        rows=[(True,)],
        query="DROP TABLE IF EXISTS {table}; " + _state_is("STOPPED_MISSING_TABLE"),
        history={"table.csv": LOADED},
    ),
    Case(
        id="stages_recreated_pipe_runs_again",
        source=(
            f'{CST} ("To resume loading data, these pipe objects must be recreated (using the CREATE OR '
            'REPLACE PIPE syntax)"): the stage dropped and made again, then the pipe; the rows loaded '
            "before stay in the table"
        ),
        columns="id INT, amount NUMBER(10,2)",
        copy=CSV,
        files={"again.csv": GOOD},
        rows=[(2, True)],
        query=(
            f"DROP STAGE IF EXISTS {{stage}}; CREATE {STAGE}; "
            "CREATE OR REPLACE PIPE {pipe} AUTO_INGEST = TRUE AS COPY INTO {table} " + CSV + "; "
            "SELECT (SELECT COUNT(*) FROM {table}), "
            + _state_is("RUNNING").removeprefix("SELECT ").removesuffix(" AS has")
        ),
        history={"again.csv": LOADED},
    ),
]
