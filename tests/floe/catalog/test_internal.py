"""Where internal stages keep their files, and the load-time check that lets a pipe read them."""

from __future__ import annotations

from typing import Any

import pytest

from floe.catalog.internal import is_internal, new_stage_url, table_stage_name, table_stage_url
from floe.catalog.locations import refusal
from floe.catalog.models import CopySpec, Pipe, Table, split_s3_url
from floe.settings import Settings

pytestmark = pytest.mark.unit

SETTINGS = Settings()


def pipe(url: str, integration: str | None = None) -> Pipe:
    spec = CopySpec(table="DB.S.T", stage="DB.S.ST")
    return Pipe(name="DB.S.P", copy_spec=spec, table_id="t1", stage_url=url, storage_integration=integration)


def test_each_incarnation_has_a_prefix_of_its_own() -> None:
    one, two = new_stage_url(SETTINGS), new_stage_url(SETTINGS)
    assert one != two and all(is_internal(u, SETTINGS) for u in (one, two))
    bucket, prefix = split_s3_url(one)
    assert bucket == SETTINGS.stages.bucket and prefix.startswith("stages/") and prefix.endswith("/")
    table = Table(name="DB.S.T", columns=[])
    assert table_stage_url(SETTINGS, table) == f"s3://{SETTINGS.stages.bucket}/tables/{table.id}/"
    assert table_stage_url(SETTINGS, Table(name="DB.S.T", columns=[])) != table_stage_url(SETTINGS, table)
    assert table_stage_name("DB.S.T") == "DB.S.%T"
    assert not is_internal("s3://landing/events/", SETTINGS) and not is_internal("", SETTINGS)


class NoIntegrations:
    """A catalog holding no integration, counting its lookups (refusal only calls ``find``)."""

    def __init__(self) -> None:
        self.lookups = 0

    def find(self, model: Any, name: str) -> None:
        self.lookups += 1


def test_a_pipe_reads_its_internal_stage_without_an_integration() -> None:
    catalog: Any = NoIntegrations()
    assert refusal(catalog, SETTINGS, pipe(new_stage_url(SETTINGS))) is None
    # An integration naming the stages bucket is a pipe Floe never made: refused.
    said = refusal(catalog, SETTINGS, pipe(new_stage_url(SETTINGS), "I"))
    assert said is not None and "internal stages bucket" in said
    assert catalog.lookups == 0  # decided by the URL alone, whatever the catalog holds
    # An external pipe still needs its integration.
    external = refusal(
        catalog, SETTINGS.model_copy(update={"stages_without_integration": False}), pipe("s3://b/p/")
    )
    assert external is not None and "names no storage integration" in external
