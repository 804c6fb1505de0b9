"""The monitoring profile without a Docker engine: docker-compose.yml, Prometheus's and Grafana's
files parse, reference files that exist and ports Floe serves, and every panel of the dashboard
asks for metrics Floe exports (and every metric Floe exports is on it)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from floe.metrics import ApiProcessMetrics, ConsumerMetrics, PipelineMetrics, QueueCollector
from floe.settings import Settings

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "infra" / "grafana" / "dashboards" / "floe.json"
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def compose() -> dict[str, Any]:
    return dict(load(ROOT / "docker-compose.yml"))


def exported() -> dict[str, str]:
    """Every sample name a Floe process exports -> its family, from the processes' own registries."""
    families = [
        f
        for m in (ApiProcessMetrics, ConsumerMetrics, PipelineMetrics)
        for f in m.create().registry.collect()
    ]
    families += QueueCollector.families()
    return {
        family.name + suffix: family.name
        for family in families
        if family.name.startswith("floe_")
        for suffix in SUFFIXES[family.type]
    }


def panels() -> list[dict[str, Any]]:
    return [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]


def test_the_monitoring_profile_adds_prometheus_and_grafana_only() -> None:
    services = compose()["services"]
    profiled = {name for name, s in services.items() if "monitoring" in s.get("profiles", [])}
    assert profiled == {"prometheus", "grafana"}
    assert services["grafana"]["depends_on"] == {"prometheus": {"condition": "service_healthy"}}


def test_every_bind_mount_names_a_file_of_the_repository_and_every_volume_is_declared() -> None:
    doc = compose()
    declared = set(doc["volumes"])
    mounts = 0
    for name, service in doc["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                mounts += 1
                assert (ROOT / source).exists(), f"{name} mounts {source}, which does not exist"
            else:
                assert source in declared, f"{name} uses volume {source}, not declared"
    assert mounts == 4


def test_grafana_reads_the_provisioning_files_and_the_dashboard_where_they_point() -> None:
    grafana = compose()["services"]["grafana"]
    targets = {v.split(":")[0]: v.split(":")[1] for v in grafana["volumes"] if v.startswith("./")}
    provider = load(ROOT / "infra/grafana/provisioning/dashboards/floe.yml")["providers"][0]
    assert targets["./infra/grafana/dashboards"] == provider["options"]["path"]
    assert grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"].startswith(
        provider["options"]["path"]
    )
    source = load(ROOT / "infra/grafana/provisioning/datasources/prometheus.yml")["datasources"][0]
    assert source["url"] == "http://prometheus:9090"
    uids = {t["datasource"]["uid"] for p in panels() for t in [p, *p["targets"]]}
    assert uids == {source["uid"]}


def test_prometheus_scrapes_the_three_processes_on_the_ports_floe_serves() -> None:
    settings = Settings()
    doc = compose()
    config = load(ROOT / "infra/prometheus/prometheus.yml")
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in config["scrape_configs"]}
    assert targets == {
        "floe-api": [f"api:{settings.api.port}"],
        "floe-consumer": [f"consumer:{settings.consumer.metrics_port}"],
        "floe-pipeline": [f"pipeline:{settings.pipeline.metrics_port}"],
    }
    mounted = doc["services"]["prometheus"]["volumes"][0].split(":")
    assert mounted[:2] == ["./infra/prometheus/prometheus.yml", "/etc/prometheus/prometheus.yml"]
    for name in ("api", "consumer", "pipeline"):
        # Each process binds its metrics where the API binds: all interfaces in its container.
        assert doc["services"][name]["environment"]["FLOE_API__HOST"] == "0.0.0.0", name


def test_prometheus_sends_the_scrape_token_every_floe_process_reads() -> None:
    """Bound to all interfaces in their containers, the three pages answer only the scrape token
    (decision 113): Prometheus reads the file keygen writes, from the volume they share."""
    doc = compose()
    services = doc["services"]
    config = load(ROOT / "infra/prometheus/prometheus.yml")
    files = {job["authorization"]["credentials_file"] for job in config["scrape_configs"]}
    assert {job["authorization"]["type"] for job in config["scrape_configs"]} == {"Bearer"}
    (token_file,) = files
    for name in ("api", "consumer", "pipeline"):
        assert services[name]["environment"]["FLOE_API__METRICS_TOKEN_FILE"] == token_file, name
    shared = {v.split(":")[1] for v in services["prometheus"]["volumes"] if v.startswith("floe-shared:")}
    assert shared == {str(Path(token_file).parent)}
    assert services["prometheus"]["depends_on"]["keygen"] == {"condition": "service_completed_successfully"}
    assert "create_private_file(s.api.metrics_token_file" in " ".join(services["keygen"]["command"])


def test_the_api_healthcheck_asks_readyz() -> None:
    check = compose()["services"]["api"]["healthcheck"]
    assert "http://127.0.0.1:8080/readyz" in " ".join(check["test"])
    assert check["start_period"] == "90s"


def test_every_panel_asks_for_metrics_floe_exports_and_every_metric_is_on_the_dashboard() -> None:
    names = exported()
    shown: set[str] = set()
    for panel in panels():
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            expr = target["expr"]
            assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), expr
            used = re.findall(r"\bfloe_[a-z_]+\b", expr)
            assert used, f"{panel['title']}: {expr}"
            unknown = [u for u in used if u not in names]
            assert not unknown, f"{panel['title']} asks for {unknown}, which no Floe process exports"
            shown.update(names[u] for u in used)
    assert shown == set(names.values())
