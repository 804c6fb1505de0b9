"""API integrations and external functions through the SQL executor, against the real Redis (issue 14):
the shared integration namespace, the API key that no output shows, overloads, secure functions,
privileges, and ``resolve_function``. The access matrix (test_access_matrix.py) has a row for each
statement form; these tests follow the behaviour across statements."""

from __future__ import annotations

import logging
import secrets
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from bench.harness import unique
from floe.catalog import ADMIN_ROLE, ApiIntegration, ExternalFunction, Role, User
from floe.catalog.ddl import Defaults
from floe.errors import CompilationError, ObjectNotFound, PermissionDenied, SqlError
from floe.keypair import new_private_key, public_key_body
from services.access import resolve_function
from services.api import create_app
from services.auth import Principal
from services.sql import SqlExecutor
from tests.asgi import AppClient
from tests.services.test_snowpipe import bearer, token

pytestmark = pytest.mark.integration

ADMIN = Principal("FLOE_ADMIN", frozenset({ADMIN_ROLE, "PUBLIC"}))
HOST = "https://fn.example.com"


def run(ex: SqlExecutor, sql: str, principal: Principal = ADMIN) -> list[dict[str, Any]]:
    return ex.execute(sql, principal).records()


def props(ex: SqlExecutor, sql: str, principal: Principal = ADMIN) -> dict[str, Any]:
    """A DESC answer as property -> value."""
    return {str(r["property"]): r["value"] for r in run(ex, sql, principal)}


def api_integration(ex: SqlExecutor, name: str, tail: str = "", *, head: str = "CREATE") -> None:
    run(
        ex,
        f"{head} API INTEGRATION {name} API_PROVIDER = aws_api_gateway "
        f"API_ALLOWED_PREFIXES = ('{HOST}/v1/') ENABLED = TRUE {tail}",
    )


def function(ex: SqlExecutor, head: str, tail: str = "", principal: Principal = ADMIN) -> str:
    """CREATE ... EXTERNAL FUNCTION <head> RETURNS VARIANT ... through ``tail``'s integration."""
    create, _, signature = head.partition(" EXTERNAL FUNCTION ")
    rows = run(
        ex,
        f"{create} EXTERNAL FUNCTION {signature} RETURNS VARIANT {tail or 'API_INTEGRATION = gate'} "
        f"AS '{HOST}/v1/f'",
        principal,
    )
    return str(rows[0]["STATUS"])


def user(ex: SqlExecutor, role: str) -> Principal:
    """A user whose only role is ``role`` (created), with USAGE on the default database and schema."""
    run(ex, f"CREATE ROLE IF NOT EXISTS {role}")
    run(ex, f"GRANT USAGE ON DATABASE floe TO ROLE {role}")
    run(ex, f"GRANT USAGE ON SCHEMA floe.public TO ROLE {role}")
    name = unique("u")
    run(ex, f"CREATE USER {name} DEFAULT_ROLE = {role}")
    run(ex, f"GRANT ROLE {role} TO USER {name}")
    return Principal.of(ex.catalog.get(User, name.upper()))


def refused(ex: SqlExecutor, sql: str, principal: Principal = ADMIN) -> SqlError:
    with pytest.raises(SqlError) as info:
        ex.execute(sql, principal)
    return info.value


# ------------------------------------------------------------------------------- API integrations


def test_an_api_integration_is_shown_listed_altered_and_dropped(ex: SqlExecutor) -> None:
    api_integration(
        ex, "gate", "API_KEY = 'k' COMMENT = 'scoring' API_AWS_ROLE_ARN = 'arn:aws:iam::1:role/r'"
    )
    assert ex.catalog.get(ApiIntegration, "GATE").provider == "AWS_API_GATEWAY"
    everything = {r["name"]: r for r in run(ex, "SHOW INTEGRATIONS")}
    assert (everything["GATE"]["type"], everything["GATE"]["category"]) == ("EXTERNAL_API", "API")
    assert (everything["FLOE_TESTS"]["type"], everything["FLOE_TESTS"]["category"]) == (
        "EXTERNAL_STAGE",
        "STORAGE",
    )
    assert everything["GATE"]["enabled"] == "true" and everything["GATE"]["comment"] == "scoring"
    assert [r["name"] for r in run(ex, "SHOW API INTEGRATIONS")] == ["GATE"]
    assert "GATE" not in [r["name"] for r in run(ex, "SHOW STORAGE INTEGRATIONS")]
    shown = props(ex, "DESC API INTEGRATION gate")
    assert shown["API_PROVIDER"] == "AWS_API_GATEWAY" and shown["API_ALLOWED_PREFIXES"] == f"{HOST}/v1/"
    assert (shown["ENABLED"], shown["API_BLOCKED_PREFIXES"], shown["API_KEY"]) == ("true", "", "********")

    run(ex, f"ALTER API INTEGRATION gate SET API_BLOCKED_PREFIXES = ('{HOST}/v1/admin') ENABLED = FALSE")
    run(ex, "ALTER INTEGRATION gate UNSET API_KEY, COMMENT")
    shown = props(ex, "DESC INTEGRATION gate")
    assert (shown["ENABLED"], shown["API_BLOCKED_PREFIXES"], shown["API_KEY"], shown["COMMENT"]) == (
        "false",
        f"{HOST}/v1/admin",
        "",
        None,
    )
    # ENABLED and COMMENT are either kind's: a bare ALTER INTEGRATION finds which.
    run(ex, "ALTER INTEGRATION gate SET ENABLED = TRUE COMMENT = 'back'")
    assert ex.catalog.get(ApiIntegration, "GATE").enabled
    run(ex, "DROP API INTEGRATION gate")
    assert ex.catalog.find(ApiIntegration, "GATE") is None


def test_storage_and_api_integrations_share_one_namespace(ex: SqlExecutor) -> None:
    api_integration(ex, "gate")
    storage = (
        "STORAGE INTEGRATION {} TYPE = EXTERNAL_STAGE STORAGE_PROVIDER = 'S3' ENABLED = TRUE "
        "STORAGE_ALLOWED_LOCATIONS = ('s3://lake/')"
    )
    for head in ("CREATE", "CREATE OR REPLACE", "CREATE"):
        ine = " IF NOT EXISTS" if head == "CREATE" else ""
        err = refused(ex, f"{head} {storage.format(ine + ' gate')}")
        assert err.code == "002002"
        assert "Integration 'GATE' already exists as an API integration" in err.message
        assert "share one namespace" in err.message
    run(ex, f"CREATE {storage.format('lake')}")
    for head in ("CREATE", "CREATE OR REPLACE"):
        with pytest.raises(SqlError, match="already exists as a storage integration"):
            api_integration(ex, "lake", head=head)
    assert ex.catalog.find(ApiIntegration, "LAKE") is None

    # A statement that names the other kind is refused, and changes nothing.
    for sql, verb in (
        ("DROP STORAGE INTEGRATION gate", "DROP"),
        ("DESC STORAGE INTEGRATION gate", "DESC"),
        ("ALTER STORAGE INTEGRATION gate SET ENABLED = FALSE", "ALTER"),
        ("ALTER INTEGRATION gate SET STORAGE_BLOCKED_LOCATIONS = ('s3://x/')", "ALTER"),
    ):
        err = refused(ex, sql)
        assert isinstance(err, CompilationError)
        assert (
            f"Integration 'GATE' is an API integration, not a storage integration; {verb} API" in err.message
        )
    assert (
        "is a storage integration, not an API integration" in refused(ex, "DROP API INTEGRATION lake").message
    )
    assert ex.catalog.get(ApiIntegration, "GATE").enabled
    # The bare noun means either kind.
    run(ex, "DROP INTEGRATION gate")
    run(ex, "DROP INTEGRATION lake")
    assert not {"GATE", "LAKE"} & {r["name"] for r in run(ex, "SHOW INTEGRATIONS")}


def test_only_a_role_with_create_integration_makes_one(ex: SqlExecutor) -> None:
    sysadmin = user(ex, "SYSADMIN")
    api_integration(ex, "gate")
    create = (
        "CREATE API INTEGRATION other API_PROVIDER = aws_api_gateway ENABLED = TRUE "
        f"API_ALLOWED_PREFIXES = ('{HOST}/')"
    )
    with pytest.raises(PermissionDenied, match="Insufficient privileges to operate on account"):
        ex.execute(create, sysadmin)
    assert ex.catalog.find(ApiIntegration, "OTHER") is None
    # CREATE INTEGRATION is grantable, as for storage integrations.
    run(ex, "GRANT CREATE INTEGRATION ON ACCOUNT TO ROLE sysadmin")
    ex.execute(create, sysadmin)
    assert ex.catalog.get(ApiIntegration, "OTHER").owner == "SYSADMIN"
    # The owner (ACCOUNTADMIN) alters; USAGE lets a role see it, not change it.
    run(ex, "GRANT USAGE ON INTEGRATION gate TO ROLE sysadmin")
    assert [r["name"] for r in run(ex, "SHOW API INTEGRATIONS", sysadmin)] == ["GATE", "OTHER"]
    assert props(ex, "DESC INTEGRATION gate", sysadmin)["API_KEY"] == ""
    with pytest.raises(PermissionDenied, match="Insufficient privileges to operate on integration 'GATE'"):
        ex.execute("ALTER API INTEGRATION gate SET ENABLED = FALSE", sysadmin)
    grants = run(ex, "SHOW GRANTS ON INTEGRATION gate")
    assert {(g["privilege"], g["grantee_name"]) for g in grants} == {
        ("OWNERSHIP", ADMIN_ROLE),
        ("USAGE", "SYSADMIN"),
    }
    run(ex, "REVOKE USAGE ON API INTEGRATION gate FROM ROLE sysadmin")
    assert [r["name"] for r in run(ex, "SHOW API INTEGRATIONS", sysadmin)] == ["OTHER"]
    with pytest.raises(ObjectNotFound, match="Integration 'GATE' does not exist or not authorized"):
        ex.execute("DESC INTEGRATION gate", sysadmin)


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return new_private_key()


def test_the_api_key_never_appears_in_any_output(
    ex: SqlExecutor,
    key: rsa.RSAPrivateKey,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A whole session over the HTTP API, answers and errors and logs included: neither key written
    shows anywhere, only the mask."""
    caplog.set_level(logging.DEBUG)
    secret, rotated = f"k3y{secrets.token_hex(12)}", f"r0t{secrets.token_hex(12)}"
    name = unique("holder").upper()
    run(ex, f"CREATE USER {name} RSA_PUBLIC_KEY = '{public_key_body(key.public_key())}'")
    run(ex, f"GRANT ROLE ACCOUNTADMIN TO USER {name}")
    outsider = user(ex, "OUTSIDER")
    create = (
        "CREATE {head} API INTEGRATION gate API_PROVIDER = aws_api_gateway ENABLED = TRUE "
        f"API_ALLOWED_PREFIXES = ('{HOST}/v1/') API_KEY = '{secret}'"
    )
    session = [
        create.format(head=""),
        create.format(head=""),  # already exists
        create.format(head="OR REPLACE"),
        create.format(head="").replace("ENABLED = TRUE", "ENABLED = MAYBE"),
        create.format(head="").replace(f"'{HOST}/v1/'", "'http://fn.example.com/'"),
        create.format(head="").replace(f"'{secret}'", secret),  # unquoted: a syntax error
        create.format(head="").replace("API INTEGRATION gate", "API INTEGRATION other") + " BOGUS = 1",
        "CREATE STORAGE INTEGRATION gate TYPE = EXTERNAL_STAGE STORAGE_PROVIDER = 'S3' ENABLED = TRUE "
        "STORAGE_ALLOWED_LOCATIONS = ('s3://lake/')",
        "SHOW INTEGRATIONS",
        "SHOW API INTEGRATIONS LIKE 'G%'",
        "DESC INTEGRATION gate",
        "DESC API INTEGRATION gate",
        "DESC STORAGE INTEGRATION gate",
        "SHOW GRANTS ON INTEGRATION gate",
        f"ALTER API INTEGRATION gate SET API_KEY = '{rotated}' COMMENT = 'rotated'",
        f"ALTER STORAGE INTEGRATION gate SET API_KEY = '{rotated}'",
        "DESC INTEGRATION gate",
        "CREATE EXTERNAL FUNCTION f(a INT) RETURNS VARIANT API_INTEGRATION = gate AS 'https://fn.example.com/v1/f'",
        "CREATE EXTERNAL FUNCTION g(a INT) RETURNS VARIANT API_INTEGRATION = gate AS 'https://elsewhere.net/f'",
        "DESC FUNCTION f(INT)",
        "SHOW EXTERNAL FUNCTIONS",
        f"ALTER API INTEGRATION gate SET API_ALLOWED_PREFIXES = ('{HOST}/v2/')",  # logs the functions
        "DROP INTEGRATION gate",
    ]
    client = AppClient(create_app(ex.settings, ex.redis))
    answers: list[str] = []
    try:
        headers = bearer(token(name, key))
        for sql in session:
            answers.append(client.request("POST", "/api/v1/sql", headers=headers, json={"sql": sql}).text)
    finally:
        client.close()
    # The executor's own errors too, as a non-admin sees them.
    api_integration(ex, "gate", f"API_KEY = '{secret}'")
    with pytest.raises(SqlError) as info:
        ex.execute("DESC INTEGRATION gate", outsider)
    answers.append(str(info.value))
    answers.append(repr(ex.catalog.get(ApiIntegration, "GATE")))
    out = capsys.readouterr()
    everything = "\n".join([*answers, caplog.text, *(str(r.args) for r in caplog.records), out.out, out.err])
    assert '"API_KEY","********"' in everything.replace(" ", ""), answers[10]
    assert (
        "already exists" in answers[1]
        and "expects a quoted value after API_KEY" in answers[5]
        and "share one namespace" in answers[7]
    )
    assert "integration GATE altered; functions" in caplog.text  # the session did reach the logs
    for leaked in (secret, rotated):
        assert leaked not in everything


# ------------------------------------------------------------------------------ external functions


def test_a_function_needs_an_enabled_api_integration_that_admits_its_url(ex: SqlExecutor) -> None:
    def create(integration: str, url: str) -> SqlError:
        return refused(
            ex,
            f"CREATE EXTERNAL FUNCTION f(a INT) RETURNS VARIANT API_INTEGRATION = {integration} AS '{url}'",
        )

    assert isinstance(create("nothing", f"{HOST}/v1/f"), ObjectNotFound)
    assert "Integration 'FLOE_TESTS' is a storage integration" in create("floe_tests", f"{HOST}/v1/f").message
    api_integration(ex, "gate", f"API_BLOCKED_PREFIXES = ('{HOST}/v1/admin')")
    for url in (
        f"{HOST}/v1evil/f",
        f"{HOST}/v2/f",
        f"{HOST}/v1/admin/f",
        "https://fn.example.com.evil.net/v1/f",
    ):
        err = create("gate", url)
        assert isinstance(err, PermissionDenied), url
        assert f"URL '{url}' is not allowed by API integration 'GATE'" in err.message
    run(ex, "ALTER INTEGRATION gate SET ENABLED = FALSE")
    err = create("gate", f"{HOST}/v1/f")
    assert err.code == "003001" and "API integration 'GATE' is disabled (ENABLED = FALSE)" in err.message
    assert not ex.catalog.all(ExternalFunction)
    run(ex, "ALTER INTEGRATION gate SET ENABLED = TRUE")
    assert function(ex, "CREATE EXTERNAL FUNCTION f(a INT)") == "Function F successfully created."
    fn = ex.catalog.get(ExternalFunction, "FLOE.PUBLIC.F(NUMBER)")
    assert (fn.function_name, fn.integration, fn.url, fn.owner) == (
        "FLOE.PUBLIC.F",
        "GATE",
        f"{HOST}/v1/f",
        ADMIN_ROLE,
    )


def test_overloads_are_separate_objects(ex: SqlExecutor) -> None:
    api_integration(ex, "gate")
    function(ex, "CREATE EXTERNAL FUNCTION f(a INT)")
    function(ex, "CREATE EXTERNAL FUNCTION f(a VARCHAR, b INT)", "API_INTEGRATION = gate COMMENT = 'two'")
    err = refused(
        ex, f"CREATE EXTERNAL FUNCTION f(x NUMBER) RETURNS VARCHAR API_INTEGRATION = gate AS '{HOST}/v1/g'"
    )
    assert (err.code, err.message) == ("002002", "Object 'FLOE.PUBLIC.F(NUMBER)' already exists.")
    assert "already exists, statement succeeded" in function(
        ex, "CREATE EXTERNAL FUNCTION IF NOT EXISTS f(b BIGINT)"
    )
    # OR REPLACE replaces the overload of the same argument types only.
    run(
        ex,
        "CREATE OR REPLACE EXTERNAL FUNCTION f(z INT) RETURNS VARCHAR API_INTEGRATION = gate "
        f"AS '{HOST}/v1/new'",
    )
    fns = ex.catalog.all(ExternalFunction)
    assert sorted(fns) == ["FLOE.PUBLIC.F(NUMBER)", "FLOE.PUBLIC.F(VARCHAR, NUMBER)"]
    assert fns["FLOE.PUBLIC.F(NUMBER)"].url == f"{HOST}/v1/new"
    assert fns["FLOE.PUBLIC.F(VARCHAR, NUMBER)"].url == f"{HOST}/v1/f"
    rows = run(ex, "SHOW EXTERNAL FUNCTIONS LIKE 'f'")
    assert [r["arguments"] for r in rows] == ["F(NUMBER) RETURN VARCHAR", "F(VARCHAR, NUMBER) RETURN VARIANT"]
    two = rows[1]
    assert {
        k: two[k] for k in ("name", "schema_name", "catalog_name", "min_num_arguments", "max_num_arguments")
    } == {
        "name": "F",
        "schema_name": "PUBLIC",
        "catalog_name": "FLOE",
        "min_num_arguments": 2,
        "max_num_arguments": 2,
    }
    assert (two["description"], two["is_secure"], two["is_external_function"], two["language"]) == (
        "two",
        "N",
        "Y",
        "EXTERNAL",
    )
    assert (two["is_builtin"], two["is_aggregate"], two["is_table_function"]) == ("N", "N", "N")
    # The argument types select the overload, by canonical type.
    assert "does not exist or not authorized" in refused(ex, "DROP FUNCTION f(BOOLEAN)").message
    assert run(ex, "DROP FUNCTION f(STRING, BIGINT)")[0]["STATUS"] == "F successfully dropped."
    assert sorted(ex.catalog.all(ExternalFunction)) == ["FLOE.PUBLIC.F(NUMBER)"]
    assert "already dropped" in run(ex, "DROP FUNCTION IF EXISTS f(VARCHAR, NUMBER)")[0]["STATUS"]


def test_desc_function_and_a_secure_functions_definition(ex: SqlExecutor) -> None:
    api_integration(ex, "gate")
    dev = user(ex, "DEV")
    run(ex, "GRANT CREATE FUNCTION ON SCHEMA floe.public TO ROLE dev")
    run(ex, "GRANT USAGE ON INTEGRATION gate TO ROLE dev")
    tail = (
        "RETURNS NULL ON NULL INPUT IMMUTABLE API_INTEGRATION = gate HEADERS = ('x-team' = 'data') "
        "CONTEXT_HEADERS = (CURRENT_USER) MAX_BATCH_ROWS = 100 COMPRESSION = DEFLATE"
    )
    function(ex, "CREATE SECURE EXTERNAL FUNCTION hidden(a INT, b STRING)", tail, dev)
    function(ex, "CREATE EXTERNAL FUNCTION plain(a INT)", "API_INTEGRATION = gate", dev)
    reader = user(ex, "READER")
    run(ex, "GRANT USAGE ON FUNCTION hidden(NUMBER, VARCHAR) TO ROLE reader")
    run(ex, "GRANT USAGE ON FUNCTION plain(NUMBER) TO ROLE reader")

    owner_view = props(ex, "DESC FUNCTION hidden(INT, VARCHAR)", dev)
    assert owner_view == {
        "signature": "(A NUMBER, B VARCHAR)",
        "returns": "VARIANT",
        "language": "EXTERNAL",
        "null handling": "RETURNS NULL ON NULL INPUT",
        "volatility": "IMMUTABLE",
        "body": f"{HOST}/v1/f",
        "headers": '{"x-team": "data"}',
        "context_headers": "[CURRENT_USER]",
        "max_batch_rows": "100",
        "compression": "DEFLATE",
        "api_integration": "GATE",
    }
    reader_view = props(ex, "DESC FUNCTION hidden(INT, VARCHAR)", reader)
    assert reader_view["body"] is None and reader_view["headers"] is None
    assert {k: v for k, v in reader_view.items() if k not in ("body", "headers")} == {
        k: v for k, v in owner_view.items() if k not in ("body", "headers")
    }
    assert props(ex, "DESC FUNCTION hidden(INT, VARCHAR)")["body"] == f"{HOST}/v1/f"  # ACCOUNTADMIN
    assert props(ex, "DESC FUNCTION plain(INT)", reader)["body"] == f"{HOST}/v1/f"
    assert props(ex, "DESC FUNCTION plain(INT)", reader)["max_batch_rows"] == "not set"
    secure = {r["name"]: r["is_secure"] for r in run(ex, "SHOW EXTERNAL FUNCTIONS", reader)}
    assert secure == {"HIDDEN": "Y", "PLAIN": "N"}


def test_function_privileges_grant_show_revoke_and_drop(ex: SqlExecutor) -> None:
    api_integration(ex, "gate")
    function(ex, "CREATE EXTERNAL FUNCTION f(a INT)")
    analyst = user(ex, "ANALYST")
    with pytest.raises(
        ObjectNotFound, match=r"Function 'FLOE.PUBLIC.F\(NUMBER\)' does not exist or not auth"
    ):
        ex.execute("DESC FUNCTION f(INT)", analyst)
    assert run(ex, "SHOW EXTERNAL FUNCTIONS", analyst) == []
    run(ex, "GRANT USAGE ON FUNCTION floe.public.f(NUMBER) TO ROLE analyst")
    assert [r["name"] for r in run(ex, "SHOW EXTERNAL FUNCTIONS IN SCHEMA floe.public", analyst)] == ["F"]
    grants = {(g["privilege"], g["granted_on"], g["name"]) for g in run(ex, "SHOW GRANTS TO ROLE analyst")}
    assert ("USAGE", "FUNCTION", "FLOE.PUBLIC.F(NUMBER)") in grants
    on = {(g["privilege"], g["grantee_name"]) for g in run(ex, "SHOW GRANTS ON FUNCTION f(INT)")}
    assert on == {("OWNERSHIP", ADMIN_ROLE), ("USAGE", "ANALYST")}
    with pytest.raises(
        PermissionDenied, match=r"Insufficient privileges to operate on function 'F\(NUMBER\)'"
    ):
        ex.execute("DROP FUNCTION f(INT)", analyst)
    run(ex, "REVOKE USAGE ON FUNCTION f(NUMBER) FROM ROLE analyst")
    assert run(ex, "SHOW EXTERNAL FUNCTIONS", analyst) == []
    # Ownership moves with GRANT OWNERSHIP, and with it DROP.
    run(ex, "GRANT OWNERSHIP ON FUNCTION f(INT) TO ROLE analyst")
    assert ("OWNERSHIP", "FUNCTION", "FLOE.PUBLIC.F(NUMBER)") in {
        (g["privilege"], g["granted_on"], g["name"]) for g in run(ex, "SHOW GRANTS TO ROLE analyst")
    }
    run(ex, "DROP FUNCTION f(INT)", analyst)
    assert not ex.catalog.all(ExternalFunction)


def test_future_grants_and_dropping_the_schema(ex: SqlExecutor) -> None:
    api_integration(ex, "gate")
    run(ex, "CREATE SCHEMA floe.fx")
    run(ex, "CREATE ROLE caller")
    run(ex, "GRANT USAGE ON FUTURE FUNCTIONS IN SCHEMA floe.fx TO ROLE caller")
    function(ex, "CREATE EXTERNAL FUNCTION floe.fx.f(a INT)")
    assert ex.catalog.get(Role, "CALLER").grants["FUNCTION FLOE.FX.F(NUMBER)"] == ["USAGE"]
    run(ex, "DROP SCHEMA floe.fx")
    assert not ex.catalog.all(ExternalFunction)
    assert "FUNCTION FLOE.FX.F(NUMBER)" not in ex.catalog.get(Role, "CALLER").grants


def test_dropping_or_replacing_the_integration_keeps_the_functions(ex: SqlExecutor) -> None:
    api_integration(ex, "gate")
    function(ex, "CREATE EXTERNAL FUNCTION f(a INT)")
    api_integration(ex, "gate", f"API_BLOCKED_PREFIXES = ('{HOST}/v1/f')", head="CREATE OR REPLACE")
    run(ex, "DROP INTEGRATION gate")
    assert ex.catalog.get(ExternalFunction, "FLOE.PUBLIC.F(NUMBER)").integration == "GATE"
    assert props(ex, "DESC FUNCTION f(INT)")["api_integration"] == "GATE"


def test_resolve_function_returns_the_overloads_the_principal_may_call(ex: SqlExecutor) -> None:
    api_integration(ex, "gate")
    run(ex, "CREATE SCHEMA floe.fx")
    for head in ("f(a INT)", "f(a VARCHAR)", "f(a INT, b INT)", "g(a INT)"):
        function(ex, f"CREATE EXTERNAL FUNCTION floe.fx.{head}")
    defaults = Defaults("FLOE", "FX")
    caller = user(ex, "CALLER")
    catalog = ex.catalog

    def names(parts: list[str], count: int, who: Principal = caller) -> list[str]:
        check = ex._check(who)
        return [f.name for f in resolve_function(catalog, check, parts, count, defaults)]

    assert names(["F"], 1, ADMIN) == ["FLOE.FX.F(NUMBER)", "FLOE.FX.F(VARCHAR)"]
    assert names(["FX", "F"], 2, ADMIN) == ["FLOE.FX.F(NUMBER, NUMBER)"]
    assert names(["FLOE", "FX", "F"], 3, ADMIN) == []
    assert names(["NOPE"], 1, ADMIN) == [] and names(["A", "B", "C", "D"], 1, ADMIN) == []
    # USAGE on the function is not enough without USAGE on its schema, and the reverse.
    run(ex, "GRANT USAGE ON FUNCTION floe.fx.f(VARCHAR) TO ROLE caller")
    assert names(["F"], 1) == []
    run(ex, "GRANT USAGE ON SCHEMA floe.fx TO ROLE caller")
    assert names(["F"], 1) == ["FLOE.FX.F(VARCHAR)"]
    run(ex, "GRANT OWNERSHIP ON FUNCTION floe.fx.f(NUMBER) TO ROLE caller")
    assert names(["F"], 1) == ["FLOE.FX.F(NUMBER)", "FLOE.FX.F(VARCHAR)"]
    assert names(["G"], 1) == []
