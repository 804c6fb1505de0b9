"""Named file formats (CREATE FILE FORMAT), referenced by stages and pipes."""

from __future__ import annotations

from tests.e2e.acceptance.case import Case

CFF = "[CFF] https://docs.snowflake.com/en/sql-reference/sql/create-file-format"

CASES = [
    Case(
        id="file_format_named_by_the_stage",
        source=f"{CFF} (example: CREATE FILE FORMAT my_csv_format TYPE = CSV FIELD_DELIMITER = '|' "
        "SKIP_HEADER = 1 NULL_IF = ('NULL', 'null') EMPTY_FIELD_AS_NULL = true); "
        "[CIT] FILE_FORMAT = ( FORMAT_NAME = 'file_format_name' )",
        columns="id INT, name VARCHAR",
        setup=(
            "CREATE FILE FORMAT {name} TYPE = CSV FIELD_DELIMITER = '|' SKIP_HEADER = 1 "
            "NULL_IF = ('NULL', 'null') EMPTY_FIELD_AS_NULL = TRUE",
        ),
        stage_options="FILE_FORMAT = (FORMAT_NAME = '{name}')",
        copy="FROM @{stage}",
        files={"a.csv": b"id|name\n1|NULL\n2|b\n3|\n"},
        rows=[(1, None), (2, "b"), (3, None)],
        history={"a.csv": {"STATUS": "Loaded", "ROW_COUNT": 3}},
    ),
    Case(
        id="file_format_named_by_the_pipe",
        source=f"{CFF}; [CIT] COPY's FILE_FORMAT = ( FORMAT_NAME = '...' ) over the stage's options",
        columns="city VARCHAR",
        setup=("CREATE FILE FORMAT {name} TYPE = JSON STRIP_OUTER_ARRAY = TRUE",),
        stage_options="FILE_FORMAT = (TYPE = CSV)",
        copy="FROM (SELECT $1:city FROM @{stage}) FILE_FORMAT = (FORMAT_NAME = '{name}')",
        files={"b.json": b'[{"city": "Oslo"}, {"city": "Lima"}]'},
        rows=[("Lima",), ("Oslo",)],
        history={"b.json": {"STATUS": "Loaded", "ROW_COUNT": 2}},
    ),
]
