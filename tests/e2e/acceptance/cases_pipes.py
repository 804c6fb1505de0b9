"""The pipe lifecycle (issue 16, helper C) as acceptance cases: VALIDATE_PIPE_LOAD, the LOAD_HISTORY
and COPY_HISTORY views, COPY_HISTORY's PIPE_NAME, SYSTEM$PIPE_STATUS's recorded fields, ALTER PIPE
SET with several properties, SYSTEM$PIPE_FORCE_RESUME and CREATE OR ALTER PIPE.

Each case's ``query`` runs after its file loaded; a statement that changes the pipe comes first,
then the SELECT that shows its effect (``floe sql`` runs them as one session, answering with the
last). "Load skipped" needs a file put twice, which the table's runner does not do:
tests/e2e/test_pipe_lifecycle.py loads one."""

from __future__ import annotations

from tests.e2e.acceptance.case import Case

DOCS = "https://docs.snowflake.com/en/"
VPL = f"[VPL] {DOCS}sql-reference/functions/validate_pipe_load"
LH = f"[LH] {DOCS}sql-reference/info-schema/load_history"
CHV = f"[CHV] {DOCS}sql-reference/account-usage/copy_history"
CHF = f"[CHF] {DOCS}sql-reference/functions/copy_history"
PST = f"[PST] {DOCS}sql-reference/functions/system_pipe_status"
APIPE = f"[APIPE] {DOCS}sql-reference/sql/alter-pipe"
PFR = f"[PFR] {DOCS}sql-reference/functions/system_pipe_force_resume"
PIPE = f"[PIPE] {DOCS}sql-reference/sql/create-pipe (CREATE OR ALTER PIPE)"

HOUR = "dateadd(hour, -1, current_timestamp())"
CSV_CONTINUE = "FROM @{stage} FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1) ON_ERROR = CONTINUE"
TWO_BAD = b"id,amount\n1,1.5\nx,2.5\n3,zz\n4,4.5\n"
"""Records 2 and 3 (lines 3 and 4) fail their columns: ON_ERROR = CONTINUE loads the other two."""
GOOD = b"id,amount\n1,1.5\n2,2.5\n"
PARTLY = {"STATUS": "Partially loaded", "ROW_COUNT": 2, "ERROR_COUNT": 2}
LOADED = {"STATUS": "Loaded", "ROW_COUNT": 2, "ERROR_COUNT": 0}


def _status_has(field: str, value: str) -> str:
    """A SELECT that is TRUE when SYSTEM$PIPE_STATUS has ``"field":value`` (value as JSON)."""
    return f"""SELECT SYSTEM$PIPE_STATUS('{{pipe}}') LIKE '%"{field}":{value}%' AS has"""


CASES = [
    Case(
        id="pipes_validate_pipe_load_every_error",
        source=(
            f"{VPL} (the documented call: pipe_name=>..., start_time=>dateadd(hour, -1, "
            "current_timestamp()); one row per error, columns ERROR ... ROW_START_LINE; CODE and "
            "SQL_STATE numbers; Floe lists every error of the file, not only the first)"
        ),
        columns="id INT, amount NUMBER(10,2)",
        copy=CSV_CONTINUE,
        files={"v.csv": TWO_BAD},
        rows=[
            ("Numeric value 'x' is not recognized", "v.csv", 3, 1, "conversion", 100038, 22018, 2, 3),
            ("Numeric value 'zz' is not recognized", "v.csv", 4, 3, "conversion", 100038, 22018, 3, 4),
        ],
        query=(
            "SELECT error, file, line, character, category, code, sql_state, row_number, row_start_line "
            "FROM table(validate_pipe_load(pipe_name=>'{pipe}', start_time=>" + HOUR + ")) ORDER BY line"
        ),
        history={"v.csv": PARTLY},
    ),
    Case(
        id="pipes_validate_pipe_load_no_errors_no_rows",
        source=f'{VPL} ("If Snowpipe encountered no errors ... the function returns no results")',
        columns="id INT, amount NUMBER(10,2)",
        copy=CSV_CONTINUE,
        files={"ok.csv": GOOD},
        rows=[],
        query=(
            "SELECT * FROM table(information_schema.validate_pipe_load(pipe_name=>'{pipe}', "
            "start_time=>" + HOUR + "))"
        ),
        history={"ok.csv": LOADED},
    ),
    Case(
        id="pipes_load_history_view",
        source=(
            f"{LH} (SELECT ... FROM information_schema.load_history WHERE table_name = ...; STATUS "
            "spelled LOADED / LOAD FAILED / PARTIALLY LOADED; FIRST_ERROR_CHARACTER_POSITION, "
            "FIRST_ERROR_COL_NAME; Floe's view lists its pipes' loads, having no bulk COPY)"
        ),
        columns="id INT, amount NUMBER(10,2)",
        copy=CSV_CONTINUE,
        files={"lh.csv": TWO_BAD},
        rows=[("lh.csv", "PARTIALLY LOADED", 2, 4, 2, "Numeric value 'x' is not recognized", 3, 1)],
        query=(
            "SELECT file_name, status, row_count, row_parsed, error_count, first_error_message, "
            "first_error_line_number, first_error_character_position FROM information_schema.load_history "
            "WHERE table_name = '{TABLE}'"
        ),
        history={"lh.csv": PARTLY},
    ),
    Case(
        id="pipes_copy_history_view",
        source=(
            f"{CHV} (the documented example: select file_name, error_count, status, last_load_time ... "
            "order by last_load_time desc limit 10; over INFORMATION_SCHEMA, 14 days)"
        ),
        columns="id INT, amount NUMBER(10,2)",
        copy=CSV_CONTINUE,
        files={"chv.csv": GOOD},
        rows=[("chv.csv", 0, "Loaded", True)],
        query=(
            "select file_name, error_count, status, last_load_time = first_commit_time "
            "from information_schema.copy_history where table_name = '{TABLE}' "
            "order by last_load_time desc limit 10"
        ),
        history={"chv.csv": LOADED},
    ),
    Case(
        id="pipes_copy_history_pipe_name",
        source=f"{CHF} (optional PIPE_NAME => '<string>': the specified pipe's loads)",
        columns="id INT, amount NUMBER(10,2)",
        copy=CSV_CONTINUE,
        files={"chf.csv": GOOD},
        rows=[("chf.csv", "Loaded")],
        query=(
            "SELECT file_name, status FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY(TABLE_NAME => '{table}', "
            "START_TIME => " + HOUR + ", PIPE_NAME => '{pipe}'))"
        ),
        history={"chf.csv": LOADED},
    ),
    Case(
        id="pipes_status_recorded_fields",
        source=(
            f"{PST} (lastIngestedFilePath: the file last loaded; lastForwardedFilePath: the file of the "
            "last notification forwarded to the pipe; lastReceivedMessageTimestamp; "
            "numOutstandingMessagesOnChannel)"
        ),
        columns="id INT, amount NUMBER(10,2)",
        copy=CSV_CONTINUE,
        files={"st.csv": GOOD},
        rows=[(True, True, True, True)],
        query=(
            "SELECT "
            + ", ".join(
                f"""SYSTEM$PIPE_STATUS('{{pipe}}') LIKE '%"{field}":{value}%'"""
                for field, value in (
                    ("lastIngestedFilePath", '"st.csv"'),
                    ("lastForwardedFilePath", '"st.csv"'),
                    ("lastReceivedMessageTimestamp", '"20'),
                    ("numOutstandingMessagesOnChannel", ""),
                )
            )
        ),
        history={"st.csv": LOADED},
    ),
    Case(
        id="pipes_alter_pipe_set_several_properties",
        source=(
            f"{APIPE} (SET takes several properties, separated by blanks, commas or new lines: "
            "PIPE_EXECUTION_PAUSED = TRUE pauses, executionState PAUSED; COMMENT = '...' as in the "
            "documented alter pipe mypipe SET COMMENT = ...)"
        ),
        columns="id INT, amount NUMBER(10,2)",
        copy=CSV_CONTINUE,
        files={"alt.csv": GOOD},
        rows=[(True,)],
        query=(
            "ALTER PIPE {pipe} SET PIPE_EXECUTION_PAUSED = TRUE, "
            "COMMENT = 'Pipe for North American sales data'; " + _status_has("executionState", '"PAUSED"')
        ),
        history={"alt.csv": LOADED},
    ),
    Case(
        id="pipes_force_resume",
        source=(
            f"{PFR} (SELECT SYSTEM$PIPE_FORCE_RESUME('mydb.myschema.mypipe') resumes a pipe paused "
            "with ALTER PIPE; its one-argument form means OWNERSHIP_TRANSFER_CHECK_OVERRIDE)"
        ),
        columns="id INT, amount NUMBER(10,2)",
        copy=CSV_CONTINUE,
        files={"fr.csv": GOOD},
        rows=[(True,)],
        query=(
            "ALTER PIPE {pipe} SET PIPE_EXECUTION_PAUSED = TRUE; "
            "SELECT SYSTEM$PIPE_FORCE_RESUME('floe.public.{pipe}'); "
            + _status_has("executionState", '"RUNNING"')
        ),
        history={"fr.csv": LOADED},
    ),
    Case(
        id="pipes_create_or_alter_keeps_history",
        source=(
            f"{PIPE} (an existing pipe is altered into the pipe defined, its COPY statement unchanged: "
            "COMMENT and PIPE_EXECUTION_PAUSED change, the load history stays)"
        ),
        columns="id INT, amount NUMBER(10,2)",
        copy=CSV_CONTINUE,
        files={"coa.csv": GOOD},
        rows=[(1, True)],
        query=(
            "CREATE OR ALTER PIPE {pipe} AUTO_INGEST = TRUE PIPE_EXECUTION_PAUSED = TRUE COMMENT = 'v2' "
            "AS COPY INTO {table} " + CSV_CONTINUE + "; "
            "SELECT (SELECT COUNT(*) FROM TABLE(INFORMATION_SCHEMA.COPY_HISTORY(TABLE_NAME => '{table}', "
            "START_TIME => "
            + HOUR
            + "))), "
            + _status_has("executionState", '"PAUSED"').removeprefix("SELECT ").removesuffix(" AS has")
        ),
        history={"coa.csv": LOADED},
    ),
]
