"""A small client for the Floe API's SQL endpoint (used by the CLI, the demo and the tests)."""

from __future__ import annotations

from typing import Any

import httpx

from floe.settings import Settings


class SqlFailed(Exception):
    """A statement answered with an error, or the API could not be reached."""


def run_sql(settings: Settings, statement: str, timeout: float = 120.0) -> dict[str, Any]:
    """POST one statement to the API; returns the JSON answer or raises SqlFailed."""
    url = f"http://{settings.api.host}:{settings.api.port}/api/v1/sql"
    try:
        resp = httpx.post(url, json={"sql": statement}, timeout=timeout)
    except httpx.ConnectError as exc:
        raise SqlFailed(
            f"cannot reach the Floe API at {url} ({exc}). Start the stack with `make up` "
            "or point FLOE_API__HOST/FLOE_API__PORT at a running API."
        ) from exc
    try:
        body = resp.json()
    except ValueError:
        raise SqlFailed(
            f"the API answered {resp.status_code} without a JSON body: {resp.text[:200]}"
        ) from None
    if resp.status_code != 200 or not body.get("success"):
        raise SqlFailed(
            f"{body.get('code', resp.status_code)} ({body.get('sqlState', '')}): {body.get('message')}"
        )
    return dict(body)


def records(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of an answer as objects keyed by upper-case column name."""
    return [dict(zip(body["columns"], row, strict=True)) for row in body["rows"]]
