"""Issue 16's acceptance table: one case per COPY option and Snowpipe feature.

Each case gives the files, the table and the COPY of a pipe, and what a user then sees: the
table's rows and each file's COPY_HISTORY row. ``tests/e2e/test_acceptance.py`` creates every
case's bucket, stage, table and pipe, drops every file at once,
waits until every file has a final history row, and then checks each case on its own. The cases
live in one module per area (``cases_*.py``), each citing where Snowflake documents the behaviour.
"""

from tests.e2e.acceptance.case import Case, all_cases

__all__ = ["Case", "all_cases"]
