"""The sdk part's registration, sizes, worker configuration, missing figures and summary rows
(bench/sdk.py; the run itself is `python -m bench.run --only sdk`)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bench.harness import isolated_settings
from bench.report import missing_figures, table_rows
from bench.run import PARTS, SMOKE_SKIPS, build_parser, parse_parts, resolve
from bench.sdk import ROWSET_MODE, SDK_CHANNELS, worker_config
from floe.settings import Settings

pytestmark = pytest.mark.unit


def test_the_sdk_part_runs_in_full_and_smoke_runs_at_their_sizes() -> None:
    assert "sdk" in PARTS and "sdk" not in SMOKE_SKIPS and parse_parts("sdk") == {"sdk"}
    smoke = resolve(build_parser().parse_args(["--smoke"]))
    full = resolve(build_parser().parse_args(["--sdk-repeats", "5"]))
    assert "sdk" in smoke.only and (smoke.sdk_rows, smoke.sdk_repeats) == (20_000, 1)
    assert (full.sdk_rows, full.sdk_repeats) == (1_000_000, 5)


def test_each_client_is_configured_for_the_https_api(tmp_path: Path) -> None:
    settings = isolated_settings(Settings(), tmp_path / "run")
    settings = settings.model_copy(
        update={"api": settings.api.model_copy(update={"tls": "auto", "port": 8443})}, deep=True
    )
    api: Any = SimpleNamespace(settings=settings)
    Path(settings.auth.admin_key_file).parent.mkdir(parents=True)
    Path(settings.auth.admin_key_file).write_text("-----BEGIN PRIVATE KEY-----\n")
    sdk = worker_config(api, "sdk", "T-STREAMING", ["a", "b"], 10, 7)
    floe = worker_config(api, "floe", "T-STREAMING", ["a", "b"], 10, 7)
    for cfg in (sdk, floe):
        assert cfg["properties"]["url"] == "https://127.0.0.1:8443"
        assert (cfg["pipe"], cfg["channels"], cfg["rows"], cfg["seed"]) == ("T-STREAMING", ["a", "b"], 10, 7)
    # The SDK in rowset mode with its key as text; Floe's client verifying against the run's CA.
    assert ROWSET_MODE.items() <= sdk["properties"].items()
    assert sdk["properties"]["private_key"].startswith("-----BEGIN")
    assert floe["properties"]["ca_file"] == str(tmp_path / "run" / "tls" / "ca.crt")
    assert not ROWSET_MODE.keys() & floe["properties"].keys()


def _fig(rate: float) -> dict[str, Any]:
    return {"rows_per_s": rate, "rows_per_s_spread": {"median": rate, "min": rate, "max": rate}, "runs": [{}]}


def test_sdk_figures_missing_and_summary_rows() -> None:
    sdk = {
        "sdk_version": "1.9.1",
        "channels": SDK_CHANNELS,
        "floe": _fig(100_000.0),
        "sdk": _fig(50_000.0),
        "sdk_over_floe_client": 0.5,
    }
    result: dict[str, Any] = {"figures": {"sdk": sdk}, "ratios": {}, "machine": {"cores": 2}, "mode": "full"}
    assert missing_figures(result, {"sdk"}, []) == []
    empty: dict[str, Any] = {"figures": {}, "ratios": {}}
    assert "figures.sdk.sdk_over_floe_client" in missing_figures(empty, {"sdk"}, [])
    rows = [row for row in table_rows(result, "1_per_s") if "SDK" in row[0]]
    assert [r[1] for r in rows] == ["50,000 rows/s", "100,000 rows/s", "0.50"]
    assert "snowpipe-streaming 1.9.1" in rows[0][0] and rows[-1][0] == "  SDK / Floe's client"
