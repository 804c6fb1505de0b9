"""Parsing API integrations, external functions, and the statements that name them (issue 14)."""

from __future__ import annotations

import pytest

from floe.catalog.access import Bulk, GrantPrivileges, RevokePrivileges, Securable, ShowGrantsOn
from floe.catalog.ddl import (
    API_PROVIDERS,
    AlterIntegration,
    CreateApiIntegration,
    CreateExternalFunction,
    Defaults,
    DescribeObject,
    DropObject,
    Name,
    Show,
    parse,
)
from floe.catalog.models import CONTEXT_FUNCTIONS, Column
from floe.errors import CompilationError

pytestmark = pytest.mark.unit

DEFAULTS = Defaults("D", "S")
PREFIX = "https://fn.example.com/v1/"
API = (
    f"CREATE API INTEGRATION gate API_PROVIDER = aws_api_gateway API_ALLOWED_PREFIXES = ('{PREFIX}') "
    "ENABLED = TRUE"
)
FUNCTION = "CREATE EXTERNAL FUNCTION f(a INT) RETURNS VARIANT API_INTEGRATION = gate"
URL = " AS 'https://fn.example.com/v1/f'"


def _error(sql: str) -> str:
    with pytest.raises(CompilationError) as info:
        parse(sql, DEFAULTS)
    text = str(info.value)
    assert text.startswith("SQL compilation error:\n")
    return text


# ------------------------------------------------------------------------------- API integrations


def test_create_api_integration_with_every_property() -> None:
    s = parse(
        "create or replace api integration if not exists gate\n"
        "  api_provider = aws_private_api_gateway\n"
        "  api_aws_role_arn = 'arn:aws:iam::123456789012:role/fn'\n"
        f"  api_allowed_prefixes = ('{PREFIX}', 'http://127.0.0.1:8080/')\n"
        "  api_blocked_prefixes = ('https://fn.example.com/v1/admin')\n"
        "  api_key = 'it''s secret'\n"
        "  enabled = false\n"
        "  comment = 'the scoring service';",
        DEFAULTS,
    )
    assert s == CreateApiIntegration(
        name="GATE",
        provider="AWS_PRIVATE_API_GATEWAY",
        allowed_prefixes=[PREFIX, "http://127.0.0.1:8080/"],
        enabled=False,
        blocked_prefixes=["https://fn.example.com/v1/admin"],
        api_key="it's secret",
        replace=True,
        if_not_exists=True,
        comment="the scoring service",
    )
    # The key never shows in the statement's repr, which a traceback or a test failure would print.
    assert "secret" not in repr(s)


@pytest.mark.parametrize("provider", [p.lower() for p in API_PROVIDERS])
def test_every_snowflake_provider_is_accepted_and_stored_upper_case(provider: str) -> None:
    s = parse(API.replace("aws_api_gateway", f"'{provider}'"))
    assert isinstance(s, CreateApiIntegration) and s.provider == provider.upper()


def test_the_cloud_identities_are_accepted_and_ignored() -> None:
    s = parse(
        f"{API} AZURE_TENANT_ID = 't' AZURE_AD_APPLICATION_ID = 'a' GOOGLE_AUDIENCE = 'g' "
        "API_AWS_ROLE_ARN = 'arn'"
    )
    assert isinstance(s, CreateApiIntegration) and s.allowed_prefixes == [PREFIX] and s.api_key is None


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "CREATE API INTEGRATION g ENABLED = TRUE",
            "CREATE API INTEGRATION needs API_PROVIDER, API_ALLOWED_PREFIXES; for example: "
            "CREATE API INTEGRATION G API_PROVIDER = aws_api_gateway",
        ),
        (API.replace("aws_api_gateway", "aws_lambda"), "invalid value 'AWS_LAMBDA' for API_PROVIDER"),
        (
            API.replace(PREFIX, "http://fn.example.com/"),
            "invalid prefix 'http://fn.example.com/' in API_ALLOWED_PREFIXES: the URL must be https://",
        ),
        (API.replace(PREFIX, "s3://bucket/"), "the URL must be https://host/path"),
        (API.replace(PREFIX, "*"), "invalid prefix '*' in API_ALLOWED_PREFIXES"),
        (API.replace(PREFIX, "https://user:pw@h/"), "must not carry a user name or password"),
        (API.replace(f"('{PREFIX}')", "()"), "API_ALLOWED_PREFIXES needs at least one prefix"),
        (f"{API} API_BLOCKED_PREFIXES = ('ftp://x/')", "invalid prefix 'ftp://x/' in API_BLOCKED_PREFIXES"),
        (f"{API} STORAGE_PROVIDER = 'S3'", "invalid property 'STORAGE_PROVIDER' for API INTEGRATION"),
        (f"{API} ENABLED = FALSE", "duplicate property 'ENABLED'"),
        (f"{API} API_KEY = 'a' API_KEY = 'b'", "duplicate property 'API_KEY'"),
        (
            API.replace(f"('{PREFIX}')", f"('{PREFIX}'"),
            "CREATE API INTEGRATION expects ',' or ')' in the list of prefixes",
        ),
    ],
)
def test_create_api_integration_errors(sql: str, message: str) -> None:
    assert message in _error(sql)


@pytest.mark.parametrize(
    "tail",
    ["API_KEY = k3yMaterial", 'API_KEY = "k3yMaterial"', "API_KEY = (k3yMaterial)", "API_KEY k3yMaterial"],
)
def test_a_malformed_api_key_is_never_repeated_in_the_error(tail: str) -> None:
    text = _error(f"{API} {tail}")
    assert "k3yMaterial" not in text
    assert "API_KEY" in text


def test_alter_api_integration_sets_and_unsets() -> None:
    s = parse(
        "ALTER API INTEGRATION IF EXISTS gate SET API_ALLOWED_PREFIXES = ('https://fn.example.com/v2/') "
        "API_BLOCKED_PREFIXES = ('https://fn.example.com/v2/x') API_KEY = 'new' ENABLED = TRUE COMMENT = 'c'"
    )
    assert s == AlterIntegration(
        name="GATE",
        if_exists=True,
        enabled=True,
        comment="c",
        family="API",
        allowed_prefixes=["https://fn.example.com/v2/"],
        blocked_prefixes=["https://fn.example.com/v2/x"],
        api_key="new",
    )
    assert "new" not in repr(s)
    assert parse("ALTER INTEGRATION gate UNSET API_KEY, API_BLOCKED_PREFIXES, COMMENT") == AlterIntegration(
        "GATE", unset=["API_KEY", "API_BLOCKED_PREFIXES", "COMMENT"], family="API"
    )
    # ENABLED and COMMENT belong to both kinds: the executor looks the integration up.
    assert parse("ALTER INTEGRATION gate SET ENABLED = FALSE") == AlterIntegration("GATE", enabled=False)
    assert parse("ALTER INTEGRATION gate SET API_KEY = 'k'") == AlterIntegration(
        "GATE", family="API", api_key="k"
    )


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("ALTER API INTEGRATION g SET", "ALTER API INTEGRATION expects at least one of ENABLED, API_ALLOWED"),
        ("ALTER API INTEGRATION g SET API_PROVIDER = x", "cannot change API_PROVIDER of an API integration"),
        ("ALTER API INTEGRATION g SET API_ALLOWED_PREFIXES = ()", "needs at least one prefix"),
        ("ALTER API INTEGRATION g SET API_BLOCKED_PREFIXES = ('http://h/')", "invalid prefix 'http://h/'"),
        ("ALTER API INTEGRATION g UNSET ENABLED", "cannot UNSET 'ENABLED' of an API integration"),
        (
            "ALTER API INTEGRATION g SET STORAGE_BLOCKED_LOCATIONS = ('s3://b/')",
            "invalid property 'STORAGE_BLOCKED_LOCATIONS' for API INTEGRATION",
        ),
        (
            "ALTER STORAGE INTEGRATION g UNSET API_KEY",
            "cannot UNSET 'API_KEY' of a storage integration",
        ),
        (
            "ALTER INTEGRATION g SET API_KEY = 'k' STORAGE_BLOCKED_LOCATIONS = ('s3://b/')",
            "'STORAGE_BLOCKED_LOCATIONS' is a property of a storage integration, not of an API integration",
        ),
        (
            "ALTER INTEGRATION g UNSET STORAGE_BLOCKED_LOCATIONS, API_KEY",
            "'API_KEY' is a property of an API integration, not of a storage integration",
        ),
    ],
)
def test_alter_api_integration_errors(sql: str, message: str) -> None:
    assert message in _error(sql)


def test_show_desc_and_drop_name_the_kind_of_integration() -> None:
    assert parse("SHOW API INTEGRATIONS LIKE 'g%'") == Show("INTEGRATION", "g%", family="API")
    assert parse("SHOW INTEGRATIONS") == Show("INTEGRATION")
    assert parse("DESC API INTEGRATION gate") == DescribeObject("INTEGRATION", "GATE", "API")
    assert parse("DESCRIBE INTEGRATION gate") == DescribeObject("INTEGRATION", "GATE")
    assert parse("DROP API INTEGRATION IF EXISTS gate") == DropObject("INTEGRATION", "GATE", True, "API")
    assert parse("DROP INTEGRATION gate") == DropObject("INTEGRATION", "GATE")
    assert "DROP INTEGRATION expects the end of the statement" in _error("DROP API INTEGRATION g CASCADE")


def test_grants_on_api_integrations() -> None:
    s = parse("GRANT USAGE ON API INTEGRATION gate TO ROLE r")
    assert s == GrantPrivileges(["USAGE"], Securable("INTEGRATION", "GATE"), "R")
    assert parse("REVOKE USAGE ON INTEGRATION gate FROM ROLE r") == RevokePrivileges(
        ["USAGE"], Securable("INTEGRATION", "GATE"), "R"
    )


# ----------------------------------------------------------------------------- external functions


def test_create_external_function_with_every_clause_in_snowflakes_order() -> None:
    s = parse(
        "CREATE OR REPLACE SECURE EXTERNAL FUNCTION IF NOT EXISTS db.fx.score(\n"
        '  a INT, "b" VARCHAR(10), c NUMBER(10, 2))\n'
        "  RETURNS VARIANT NOT NULL\n"
        "  RETURNS NULL ON NULL INPUT\n"
        "  IMMUTABLE\n"
        "  COMMENT = 'scores a row'\n"
        "  API_INTEGRATION = gate\n"
        "  HEADERS = ('X-Team' = 'data', 'x-version' = '2')\n"
        "  CONTEXT_HEADERS = (current_user, CURRENT_TIMESTAMP)\n"
        "  MAX_BATCH_ROWS = 500\n"
        "  COMPRESSION = gzip\n"
        "  AS 'https://fn.example.com/v1/score';",
        DEFAULTS,
    )
    assert s == CreateExternalFunction(
        name=Name("DB", "FX", "SCORE"),
        args=[
            Column(name="A", type="NUMBER", precision=38, scale=0),
            Column(name="b", type="VARCHAR", precision=10),
            Column(name="C", type="NUMBER", precision=10, scale=2),
        ],
        returns=Column(name="SCORE", type="VARIANT", nullable=False),
        integration="GATE",
        url="https://fn.example.com/v1/score",
        secure=True,
        strict=True,
        volatility="IMMUTABLE",
        comment="scores a row",
        headers=[("x-team", "data"), ("x-version", "2")],
        context_headers=["CURRENT_USER", "CURRENT_TIMESTAMP"],
        max_batch_rows=500,
        compression="GZIP",
        replace=True,
        if_not_exists=True,
    )
    assert s.signature == "DB.FX.SCORE(NUMBER, VARCHAR, NUMBER)"


def test_the_defaults_and_the_clauses_in_any_order() -> None:
    s = parse(f"{FUNCTION}{URL}", DEFAULTS)
    assert isinstance(s, CreateExternalFunction)
    assert (s.secure, s.strict, s.volatility, s.compression, s.max_batch_rows) == (
        False,
        False,
        "VOLATILE",
        "AUTO",
        None,
    )
    assert s.returns.nullable and s.headers == [] and s.context_headers == []
    assert s.signature == "D.S.F(NUMBER)"
    t = parse(
        "CREATE EXTERNAL FUNCTION f() RETURNS VARCHAR NULL COMPRESSION = NONE MAX_BATCH_ROWS = 1 "
        "API_INTEGRATION = gate STRICT VOLATILE COMMENT = 'x'" + URL,
        DEFAULTS,
    )
    assert isinstance(t, CreateExternalFunction)
    assert (t.strict, t.compression, t.max_batch_rows, t.comment, t.args) == (True, "NONE", 1, "x", [])
    assert t.signature == "D.S.F()"


def test_overloads_are_keyed_by_canonical_argument_types() -> None:
    spellings = [
        "f(a INT, b STRING)",
        "f(x NUMBER(38, 0), y VARCHAR(5))",
        "f(a BIGINT, b TEXT)",
        "f(a DECIMAL, b CHARACTER VARYING(3))",
    ]
    signatures = set()
    for head in spellings:
        s = parse(f"CREATE EXTERNAL FUNCTION {head} RETURNS VARIANT API_INTEGRATION = g{URL}")
        assert isinstance(s, CreateExternalFunction)
        signatures.add(s.signature)
    assert signatures == {"FLOE.PUBLIC.F(NUMBER, VARCHAR)"}
    other = parse(f"CREATE EXTERNAL FUNCTION f(a FLOAT, b VARCHAR) RETURNS VARIANT API_INTEGRATION = g{URL}")
    assert isinstance(other, CreateExternalFunction) and other.signature == "FLOE.PUBLIC.F(FLOAT, VARCHAR)"


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (f"{FUNCTION} REQUEST_TRANSLATOR = t{URL}", "REQUEST_TRANSLATOR is not supported"),
        (f"{FUNCTION} RESPONSE_TRANSLATOR = db.s.t{URL}", "RESPONSE_TRANSLATOR is not supported"),
        (
            f"CREATE EXTERNAL FUNCTION f(a INT) RETURNS VARIANT{URL}",
            "CREATE EXTERNAL FUNCTION needs API_INTEGRATION = <api integration>",
        ),
        (
            f"{FUNCTION} AS 'http://fn.example.com/f'",
            "invalid URL 'http://fn.example.com/f' after AS: the URL must be https://",
        ),
        (f"{FUNCTION} AS 'https://h/f#x'", "must not have a #fragment"),
        (f"{FUNCTION} AS https://h/f", "CREATE EXTERNAL FUNCTION expects the remote service's URL in quotes"),
        (f"{FUNCTION}", "unexpected '<EOF>'. CREATE EXTERNAL FUNCTION expects CALLED ON NULL INPUT"),
        (f"{FUNCTION}{URL} x", "unexpected 'x'. CREATE EXTERNAL FUNCTION expects the end of the statement"),
        (f"{FUNCTION} VOLATILE IMMUTABLE{URL}", "duplicate clause VOLATILITY"),
        (f"{FUNCTION} STRICT CALLED ON NULL INPUT{URL}", "duplicate clause NULL HANDLING"),
        (f"{FUNCTION} API_INTEGRATION = other{URL}", "duplicate clause API_INTEGRATION"),
        (f"{FUNCTION} MAX_BATCH_ROWS = 0{URL}", "invalid value '0' for MAX_BATCH_ROWS; it takes a positive"),
        (f"{FUNCTION} MAX_BATCH_ROWS = -5{URL}", "invalid value '-5' for MAX_BATCH_ROWS"),
        (f"{FUNCTION} MAX_BATCH_ROWS = {'9' * 5000}{URL}", "invalid value '99999"),
        (f"{FUNCTION} MAX_BATCH_ROWS = 'ten'{URL}", "expects a positive integer after MAX_BATCH_ROWS ="),
        (f"{FUNCTION} COMPRESSION = BROTLI{URL}", "expects AUTO, NONE, GZIP or DEFLATE"),
        (f"{FUNCTION} CONTEXT_HEADERS = (CURRENT_FOO){URL}", "'CURRENT_FOO' cannot be a context header"),
        (
            f"{FUNCTION} CONTEXT_HEADERS = (CURRENT_USER, current_user){URL}",
            "duplicate context header 'CURRENT_USER'",
        ),
        (f"{FUNCTION} HEADERS = ('a' = 'x', 'A' = 'y'){URL}", "duplicate header 'a' in HEADERS"),
        (f"{FUNCTION} HEADERS = ('bad name' = 'x'){URL}", "invalid header name 'bad name'"),
        (f"{FUNCTION} HEADERS = ('x-a' = 'v\r\nx-api-key: k'){URL}", "has a line break or control character"),
        (f"{FUNCTION} HEADERS = (x = 'v'){URL}", "expects a quoted header name"),
        (
            "CREATE EXTERNAL FUNCTION f(a INT, A INT) RETURNS VARIANT API_INTEGRATION = g" + URL,
            "duplicate argument",
        ),
        (
            "CREATE EXTERNAL FUNCTION f(INT) RETURNS VARIANT API_INTEGRATION = g" + URL,
            "expects the argument's type",
        ),
        (
            "CREATE EXTERNAL FUNCTION f(a GEOGRAPHY) RETURNS VARIANT API_INTEGRATION = g" + URL,
            "Unsupported data type",
        ),
        (
            "CREATE EXTERNAL FUNCTION f(a WIDGET) RETURNS VARIANT API_INTEGRATION = g" + URL,
            "unsupported data type",
        ),
        (
            "CREATE EXTERNAL FUNCTION f(a INT RETURNS VARIANT API_INTEGRATION = g" + URL,
            "',' or ')' in the argument",
        ),
        (
            "CREATE EXTERNAL FUNCTION f RETURNS VARIANT API_INTEGRATION = g" + URL,
            "the arguments in parentheses",
        ),
        (
            "CREATE EXTERNAL FUNCTION f() API_INTEGRATION = g" + URL,
            "CREATE EXTERNAL FUNCTION expects RETURNS",
        ),
        (
            "CREATE EXTERNAL FUNCTION f() RETURNS TABLE (a INT) API_INTEGRATION = g" + URL,
            "RETURNS TABLE is not",
        ),
    ],
)
def test_create_external_function_errors(sql: str, message: str) -> None:
    assert message in _error(sql)


@pytest.mark.parametrize(
    "header",
    [
        "Content-Type",
        "content-encoding",
        "Content-Length",
        "X-API-Key",
        "Host",
        "sf-external-function-format",
        "SF-External-Function-Current-Query-Id",
        "sf-context-current-user",
    ],
)
def test_the_protocols_own_headers_are_refused(header: str) -> None:
    text = _error(f"{FUNCTION} HEADERS = ('{header}' = 'x'){URL}")
    assert f"header '{header.lower()}' is the remote-service protocol's own" in text


def test_every_context_function_is_accepted() -> None:
    s = parse(f"{FUNCTION} CONTEXT_HEADERS = ({', '.join(CONTEXT_FUNCTIONS)}){URL}")
    assert isinstance(s, CreateExternalFunction) and s.context_headers == list(CONTEXT_FUNCTIONS)


def test_show_desc_drop_and_grants_name_an_overload_by_its_types() -> None:
    assert parse("SHOW EXTERNAL FUNCTIONS") == Show("FUNCTION")
    assert parse("show external functions like 'SC%' in schema fx", DEFAULTS) == Show(
        "FUNCTION", "SC%", "SCHEMA", "D.FX"
    )
    assert parse("SHOW EXTERNAL FUNCTIONS IN DATABASE db") == Show("FUNCTION", None, "DATABASE", "DB")
    assert parse("DESC FUNCTION db.fx.score(int, string)") == DescribeObject(
        "FUNCTION", "DB.FX.SCORE(NUMBER, VARCHAR)"
    )
    assert parse("DROP FUNCTION IF EXISTS score()", DEFAULTS) == DropObject("FUNCTION", "D.S.SCORE()", True)
    assert parse("DROP EXTERNAL FUNCTION score(variant)", DEFAULTS) == DropObject(
        "FUNCTION", "D.S.SCORE(VARIANT)"
    )
    grant = parse("GRANT USAGE ON FUNCTION db.fx.score(NUMBER(38,0), VARCHAR) TO ROLE r")
    assert grant == GrantPrivileges(["USAGE"], Securable("FUNCTION", "DB.FX.SCORE(NUMBER, VARCHAR)"), "R")
    assert parse("SHOW GRANTS ON FUNCTION score(int)", DEFAULTS) == ShowGrantsOn(
        Securable("FUNCTION", "D.S.SCORE(NUMBER)")
    )
    assert parse("GRANT ALL ON FUTURE FUNCTIONS IN SCHEMA fx TO ROLE r", DEFAULTS) == GrantPrivileges(
        ["USAGE"], Bulk(True, "FUNCTION", "SCHEMA", "D.FX"), "R"
    )


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("DROP FUNCTION score", "DROP FUNCTION expects the argument types in parentheses"),
        ("DESC FUNCTION score(a INT)", "unsupported data type 'a'"),
        ("DROP FUNCTION score(INT", "DROP FUNCTION expects ',' or ')' in the argument types"),
        ("DROP FUNCTION score() CASCADE", "DROP FUNCTION expects the end of the statement"),
        ("GRANT SELECT ON FUNCTION f() TO ROLE r", "invalid privilege 'SELECT' on a function"),
        ("GRANT USAGE ON FUNCTION f TO ROLE r", "GRANT expects the argument types in parentheses"),
        ("SHOW EXTERNAL FUNCTIONS IN TABLE t", "SHOW EXTERNAL FUNCTIONS expects ACCOUNT, DATABASE or SCHEMA"),
    ],
)
def test_naming_a_function_errors(sql: str, message: str) -> None:
    assert message in _error(sql)
