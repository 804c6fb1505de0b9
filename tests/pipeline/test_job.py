"""The driver's re-check of a pipe's storage integration before each load, against the real Redis
catalog (the end-to-end path is tests/e2e/test_integrations.py)."""

from __future__ import annotations

import pytest
import redis

from floe.catalog import Catalog, CopySpec, Pipe, Stage, StorageIntegration
from floe.catalog.locations import refusal
from floe.keys import Keys
from floe.records import LoadOutcome, LoadTask, PipeResults, RowAppend
from floe.settings import Settings
from pipeline.job import channel_settles, on_driver

pytestmark = pytest.mark.integration


def pipe(url: str, integration: str | None) -> Pipe:
    spec = CopySpec(table="FLOE.PUBLIC.T", stage="FLOE.PUBLIC.ST")
    return Pipe(
        name="FLOE.PUBLIC.P", copy_spec=spec, table_id="t1", stage_url=url, storage_integration=integration
    )


class Driver:
    """The catalog and settings the driver checks a pipe with."""

    def __init__(self, settings: Settings, catalog: Catalog) -> None:
        self.settings = settings
        self.catalog = catalog

    def refusal(self, p: Pipe) -> str | None:
        return refusal(self.catalog, self.settings, p)


@pytest.fixture
def driver(isolated_settings: Settings, redis_client: redis.Redis[bytes]) -> Driver:
    catalog = Catalog(redis_client, Keys(isolated_settings.redis.prefix))
    catalog.put(
        StorageIntegration(name="LAKE", allowed_locations=["s3://lake/"], blocked_locations=["s3://lake/x/"])
    )
    return Driver(isolated_settings, catalog)


def test_a_pipe_inside_its_integration_loads(driver: Driver) -> None:
    assert driver.refusal(pipe("s3://lake/in/", "LAKE")) is None


@pytest.mark.parametrize(
    ("url", "integration", "reason"),
    [
        ("s3://lake/x/in/", "LAKE", "is no longer allowed by storage integration 'LAKE'"),
        ("s3://other/", "LAKE", "is no longer allowed by storage integration 'LAKE'"),
        ("s3://lake/in/", "GONE", "Storage integration 'GONE' of stage FLOE.PUBLIC.ST no longer exists"),
        ("s3://lake/in/", None, "names no storage integration"),
    ],
)
def test_a_pipe_outside_its_integration_is_refused(
    driver: Driver, url: str, integration: str | None, reason: str
) -> None:
    refused = driver.refusal(pipe(url, integration))
    assert refused is not None and reason in refused


def test_a_disabled_integration_refuses_every_pipe(driver: Driver) -> None:
    driver.catalog.put(driver.catalog.get(StorageIntegration, "LAKE").model_copy(update={"enabled": False}))
    assert "is disabled" in (driver.refusal(pipe("s3://lake/in/", "LAKE")) or "")


def test_the_tables_bucket_is_refused_whatever_the_integration(driver: Driver) -> None:
    driver.catalog.put(StorageIntegration(name="ALL", allowed_locations=["*"]))
    tables = driver.settings.pipeline.tables_bucket
    assert "tables bucket" in (driver.refusal(pipe(f"s3://{tables}/", "ALL")) or "")


def test_an_older_pipe_is_bound_by_its_stages_integration(driver: Driver) -> None:
    """Pipes made before they recorded their integration fall back to their stage's."""
    driver.catalog.put(Stage(name="FLOE.PUBLIC.ST", url="s3://lake/in/", storage_integration="LAKE"))
    assert driver.refusal(pipe("s3://lake/in/", None)) is None
    assert "no longer allowed" in (driver.refusal(pipe("s3://lake/x/", None)) or "")


def test_without_an_integration_only_the_setting_lets_a_pipe_load(driver: Driver) -> None:
    driver.settings = driver.settings.model_copy(update={"stages_without_integration": True})
    assert driver.refusal(pipe("s3://anywhere/", None)) is None


def appended(channel: str, rseq: int, *, cseq: int = 1, end: str | None = None, size: int = 10) -> LoadTask:
    a = RowAppend(
        channel, "inc", cseq, rseq, 2, size, None, end, 1_000, f"data:{channel}:{cseq}:{rseq}", f"1-{rseq}"
    )
    return LoadTask.appended("pipe", a)


def loaded(task: LoadTask, rows: int, errors: int = 0, error: str | None = None) -> LoadOutcome:
    status = "LOADED" if not errors else "PARTIALLY_LOADED"
    return LoadOutcome(
        task.path, status, rows + errors, rows, errors, first_error=error, stream_id=task.stream_id
    )


@pytest.mark.unit
def test_channel_settles_add_up_each_channels_appends() -> None:
    a1, a2, b1 = appended("a", 1, end="10"), appended("a", 2), appended("b", 3, end="x", size=5)
    res = PipeResults(
        outcomes=[loaded(a1, 2), loaded(a2, 1, errors=1, error="bad"), loaded(b1, 2)],
        blobs=[{"name": "blob-a", "files": [a1.path, a2.path]}, {"name": "blob-b", "files": [b1.path]}],
    )
    settles = {s.channel: s for s in channel_settles(res, [b1, a2, a1], now=1_500)}
    a, b = settles["a"], settles["b"]
    assert (a.appends, a.bytes, a.rows_inserted, a.rows_parsed, a.errors) == (2, 20, 3, 4, 1)
    # The token is the last one carried (a2 carried none); the error's bound is its append's token.
    assert a.token == "10" and a.last_error == "bad" and a.last_error_bound is None
    assert [x["name"] for x in a.blobs] == ["blob-a"] and a.stream_ids == ["1-1", "1-2"]
    assert (b.token, b.bytes, [x["name"] for x in b.blobs]) == ("x", 5, ["blob-b"])
    assert a.latency_ms == 500


@pytest.mark.unit
def test_an_empty_offset_token_is_no_token() -> None:
    """The SDK sends endOffsetToken= when an append has none: an append queued so (before the API
    read "" as no token) leaves the channel's token as it was, and its error no bound."""
    a1, a2 = appended("a", 1, end="7"), appended("a", 2, end="")
    res = PipeResults(
        outcomes=[loaded(a1, 1), loaded(a2, 1, errors=1, error="bad")],
        blobs=[{"name": "blob-a", "files": [a1.path, a2.path]}],
    )
    (a,) = channel_settles(res, [a1, a2], now=2_000)
    assert (a.token, a.last_error, a.last_error_bound) == ("7", "bad", None)


@pytest.mark.unit
def test_a_reopen_inside_the_batch_keeps_the_writers_apart() -> None:
    old, new = appended("a", 1, cseq=1, end="1"), appended("a", 2, cseq=2, end="2")
    res = PipeResults(
        outcomes=[loaded(old, 1), loaded(new, 1)],
        blobs=[{"name": "old", "files": [old.path]}, {"name": "new", "files": [new.path]}],
    )
    settles = sorted(channel_settles(res, [old, new], now=2_000), key=lambda s: s.client_sequencer)
    assert [(s.client_sequencer, s.token, [b["name"] for b in s.blobs]) for s in settles] == [
        (1, "1", ["old"]),
        (2, "2", ["new"]),
    ]


def task(size: int | None) -> LoadTask:
    return LoadTask("p1", f"f{size}.csv", size, 1, "1-0")


@pytest.mark.unit
@pytest.mark.parametrize(
    ("sizes", "driver"),
    [
        ([10], True),
        ([10] * 8, True),  # as many files as allowed
        ([10] * 9, False),  # one too many
        ([4 << 20, 4 << 20], True),  # exactly the bytes allowed
        ([4 << 20, (4 << 20) + 1], False),
        ([10, None], False),  # a file of unknown size may be any size
        ([], False),
    ],
)
def test_a_micro_batch_loads_in_the_driver_only_when_small(sizes: list[int | None], driver: bool) -> None:
    assert on_driver([task(s) for s in sizes], 8, 8 << 20) is driver


@pytest.mark.unit
def test_no_batch_loads_in_the_driver_when_it_is_turned_off() -> None:
    assert not on_driver([task(1)], 0, 8 << 20)
