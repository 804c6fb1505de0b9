"""Fixtures of the security suite: the shared running stack, its admin, and an unprivileged user.

The unprivileged user is the one the issue's attacks ran as: its only role holds OPERATE on one
pipe, and nothing else.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.harness import unique
from tests.conftest import Stack
from tests.security.attacks.caller import SqlCaller, new_user


@pytest.fixture(scope="session")
def admin(stack: Stack) -> SqlCaller:
    """The administrator (ACCOUNTADMIN), signing with the stack's admin key."""
    return SqlCaller(stack.settings, stack.settings.auth.admin_user, stack.settings.auth.admin_key_file)


@pytest.fixture(scope="session")
def mallory(admin: SqlCaller, stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> SqlCaller:
    """A user whose only privileges are USAGE on the default database and schema, SELECT on one table
    and OPERATE on one pipe into it, with a stage, all of its own name (owned by ACCOUNTADMIN)."""
    name = unique("mallory").upper().replace("-", "_")
    bucket = unique("stage")
    from floe.aws import client as aws_client

    aws_client(stack.settings.aws, "s3").create_bucket(Bucket=bucket)
    admin.run_all(
        f"CREATE STAGE {name}_stage URL = 's3://{bucket}/in/'"
        " STORAGE_INTEGRATION = floe_tests FILE_FORMAT = (TYPE = CSV)",
        f"CREATE TABLE {name}_t (id INT, note VARCHAR)",
        f"CREATE PIPE {name}_pipe AS COPY INTO {name}_t FROM @{name}_stage",
    )
    directory: Path = tmp_path_factory.mktemp("mallory")
    return new_user(
        admin,
        directory,
        name,
        "GRANT USAGE ON DATABASE FLOE TO ROLE {role}",
        "GRANT USAGE ON SCHEMA FLOE.PUBLIC TO ROLE {role}",
        f"GRANT SELECT ON TABLE {name}_t TO ROLE {{role}}",
        f"GRANT OPERATE ON PIPE {name}_pipe TO ROLE {{role}}",
    )
