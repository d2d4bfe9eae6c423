"""The chart's dashboard Service and Ingress and its Grafana dashboard ConfigMap.

In the style of test_helm.py (whose helpers render the chart with a real helm): every
object is off by default; turned on, each points at what is rendered (the Service selects
the API pods, the Ingress the Service it names, on the port that Service has), the schema
refuses a mistyped value, and the server-side dry run on the real API server accepts the
manifests. The Grafana dashboard is checked against the code's own metrics: every metric
its queries read is one that the API or the simulator exports.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest

from tests.integration.test_helm import CHART, component, helm, of_kind, render, values_file

DASHBOARD_JSON = CHART / "dashboards" / "ultraplane.json"
ON: dict[str, Any] = {
    "dashboard": {
        "service": {"enabled": True, "type": "LoadBalancer", "port": 8443,
                    "annotations": {"example.com/lb": "internal"}},
        "ingress": {"enabled": True, "className": "nginx", "host": "ultraplane.example.com",
                    "tls": [{"secretName": "ultraplane-tls", "hosts": ["ultraplane.example.com"]}],
                    "annotations": {"cert-manager.io/cluster-issuer": "internal"}},
    },
    "grafana": {"dashboard": {"enabled": True, "folder": "Ultraplane",
                              "namespace": "monitoring"}},
}


@pytest.mark.kube
def test_everything_is_off_by_default() -> None:
    docs = render()
    assert not of_kind(docs, "Ingress") and not of_kind(docs, "ConfigMap")
    assert [d["metadata"]["name"] for d in of_kind(docs, "Service")
            if "dashboard" in d["metadata"]["name"]] == []


@pytest.mark.kube
def test_service_selects_the_api_pods_and_the_ingress_points_at_it() -> None:
    docs = render(ON)
    api = component(docs, "Deployment", "api")
    service = component(docs, "Service", "dashboard")
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["metadata"]["annotations"] == {"example.com/lb": "internal"}
    pod_labels = api["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    port_names = {p["name"] for c in api["spec"]["template"]["spec"]["containers"]
                  for p in c.get("ports", [])}
    assert service["spec"]["ports"] == [{"name": "http", "port": 8443, "targetPort": "http",
                                         "protocol": "TCP"}]
    assert "http" in port_names
    ingress = component(docs, "Ingress", "dashboard")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == ON["dashboard"]["ingress"]["tls"]
    rule = ingress["spec"]["rules"][0]
    assert rule["host"] == "ultraplane.example.com"
    path = rule["http"]["paths"][0]
    assert path["path"] == "/" and path["pathType"] == "Prefix"
    assert path["backend"]["service"] == {"name": service["metadata"]["name"],
                                          "port": {"number": 8443}}


@pytest.mark.kube
def test_ingress_without_its_service_points_at_the_api_service() -> None:
    docs = render({"dashboard": {"ingress": {"enabled": True}}})
    api_service = component(docs, "Service", "api")
    backend = component(docs, "Ingress", "dashboard")["spec"]["rules"][0]["http"]["paths"][0]
    assert backend["backend"]["service"] == {
        "name": api_service["metadata"]["name"],
        "port": {"number": api_service["spec"]["ports"][0]["port"]}}
    assert "host" not in component(docs, "Ingress", "dashboard")["spec"]["rules"][0]


@pytest.mark.kube
def test_grafana_configmap_carries_the_sidecar_label_and_the_dashboard() -> None:
    docs = render(ON)
    cm = component(docs, "ConfigMap", "grafana-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["annotations"]["grafana_folder"] == "Ultraplane"
    assert json.loads(cm["data"]["ultraplane.json"]) == json.loads(DASHBOARD_JSON.read_text())
    relabelled = render({"grafana": {"dashboard": {"enabled": True, "label": "dashboards",
                                                   "labelValue": "ultraplane"}}})
    labels = component(relabelled, "ConfigMap", "grafana-dashboard")["metadata"]["labels"]
    assert labels["dashboards"] == "ultraplane" and "grafana_dashboard" not in labels


@pytest.mark.kube
@pytest.mark.parametrize("bad,field", [
    ({"dashboard": {"service": {"type": "External"}}}, "type"),
    ({"dashboard": {"ingress": {"path": "dashboard"}}}, "path"),
    ({"dashboard": {"ingress": {"enabled": "yes"}}}, "enabled"),
    ({"grafana": {"dashboard": {"labelValue": 1}}}, "labelValue"),
    ({"grafana": {"dashbord": {}}}, "dashbord"),
])
def test_schema_refuses_mistyped_values(tmp_path: Path, bad: dict[str, Any], field: str) -> None:
    result = helm("template", "rel", str(CHART), "-f", str(values_file(bad, tmp_path)))
    assert result.returncode != 0
    assert field in result.stderr


@pytest.mark.kube
def test_values_are_documented_field_by_field() -> None:
    lines = (CHART / "values.yaml").read_text().splitlines()
    for section in ("dashboard:", "grafana:"):
        start = lines.index(section)
        end = next((i for i in range(start + 1, len(lines)) if re.match(r"^[a-z]", lines[i])),
                   len(lines))
        leaves = [i for i in range(start + 1, end) if re.match(r"^\s+\w+: \S", lines[i])]
        assert len(leaves) >= 6
        for i in leaves:
            assert lines[i - 1].lstrip().startswith("# "), f"undocumented value: {lines[i]}"


@pytest.mark.kube
def test_api_server_accepts_the_manifests(kube_env: Any, tmp_path: Path) -> None:
    docs = [d for d in render(ON) if d["kind"] in ("Service", "Ingress", "ConfigMap")]
    for doc in docs:
        doc["metadata"]["namespace"] = "default"
    manifest = tmp_path / "dashboard.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    result = kube_env.kubectl("apply", "--server-side", "--dry-run=server", "-f", str(manifest),
                              check=False)
    assert result.returncode == 0, result.stderr


def exported_metric_names() -> set[str]:
    """Every sample name the API's and the simulator's registries expose."""
    from ultraplane.api.metrics import Metrics
    from ultraplane.simulator.metrics import SimulatorMetrics

    api = Metrics()
    api.watch_fleet(lambda: {"chips": 1, "allocated_chips": 0, "power_watts": 0.0,
                             "utilization": 0.0, "energy_kwh": 0.0,
                             "jobs": {("TrainingJob", "Running"): 1},
                             "queues": [{"name": "q", "usedChips": 1, "nominalChips": 1,
                                         "fairShareChips": 1}],
                             "inference": [{"namespace": "ns", "name": "chat",
                                            "desiredReplicas": 2, "replicas": 2,
                                            "readyReplicas": 1, "requestsPerSecond": 10.0,
                                            "ttftP99Ms": 400.0, "ttftObjectiveMs": 800.0}],
                             "budgets": [{"name": "b", "watts": 1.0, "predictedWatts": 1.0,
                                          "measuredWatts": 1.0, "headroomWatts": 0.0}]})
    api.requests.labels("GET", "/", "200").inc()
    api.latency.labels("GET", "/").observe(0.01)
    sim = SimulatorMetrics()
    sim.us_power.labels("us").set(1)
    sim.us_util.labels("us").set(1)
    sim.job_power.labels("ns", "job").set(1)
    sim.job_progress.labels("ns", "job").set(1)
    sim.events.labels("Succeeded").inc()
    names = set()
    for registry in (api.registry, sim.registry):
        for line in generate_latest(registry).decode().splitlines():
            if line and not line.startswith("#"):
                names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def test_grafana_dashboard_reads_only_metrics_the_code_exports() -> None:
    dashboard = json.loads(DASHBOARD_JSON.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 10
    used = {name for e in exprs for name in re.findall(r"\b(ultraplane_[a-z0-9_]+)\b", e)}
    exported = exported_metric_names()
    assert used, "the dashboard reads no Ultraplane metric"
    assert used <= exported, f"not exported by the code: {sorted(used - exported)}"
    # Every fleet gauge of the API and the simulator's per-UltraServer power are drawn.
    for wanted in ("ultraplane_fleet_power_watts", "ultraplane_fleet_allocated_chips",
                   "ultraplane_jobs", "ultraplane_sim_ultraserver_power_watts",
                   "ultraplane_http_request_seconds_bucket", "ultraplane_queue_used_chips",
                   "ultraplane_power_budget_headroom_watts", "ultraplane_inferencejob_replicas",
                   "ultraplane_inferencejob_ttft_p99_seconds",
                   "ultraplane_queue_fair_share_chips"):
        assert wanted in used
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert dashboard["uid"] and dashboard["title"] == "Ultraplane"


def panel_metrics(dashboard: dict[str, Any], title: str) -> set[str]:
    """The Ultraplane metrics the panel called `title` reads (it must exist)."""
    panels = [p for p in dashboard["panels"] if p["title"] == title]
    assert len(panels) == 1, f"no panel {title!r}"
    return {name for t in panels[0]["targets"]
            for name in re.findall(r"\b(ultraplane_[a-z0-9_]+)\b", t["expr"])}


def test_grafana_dashboard_charts_inference_services_and_fair_shares() -> None:
    """The serving and fair-sharing panels read the gauges the API exports for them."""
    dashboard = json.loads(DASHBOARD_JSON.read_text())
    exported = exported_metric_names()
    wanted = {
        "InferenceJobs: replicas desired and ready": {"ultraplane_inferencejob_replicas"},
        "InferenceJobs: offered load": {"ultraplane_inferencejob_requests_per_second"},
        "InferenceJobs: p99 TTFT against the objective": {
            "ultraplane_inferencejob_ttft_p99_seconds",
            "ultraplane_inferencejob_ttft_objective_seconds"},
        "Tenant queues: fair share against chips held": {
            "ultraplane_queue_fair_share_chips", "ultraplane_queue_used_chips"},
    }
    for title, metrics in wanted.items():
        assert panel_metrics(dashboard, title) == metrics
        assert metrics <= exported, f"{title}: not exported: {sorted(metrics - exported)}"
    replicas = next(p for p in dashboard["panels"]
                    if p["title"] == "InferenceJobs: replicas desired and ready")
    states = {re.search(r'state="(\w+)"', t["expr"]).group(1)  # type: ignore[union-attr]
              for t in replicas["targets"]}
    assert states == {"desired", "ready"}
    # no panel overlaps another (Grafana would shove one aside)
    cells = {(p["gridPos"]["x"] + dx, p["gridPos"]["y"] + dy)
             for p in dashboard["panels"] if p["type"] != "row"
             for dx in range(p["gridPos"]["w"]) for dy in range(p["gridPos"]["h"])}
    assert len(cells) == sum(p["gridPos"]["w"] * p["gridPos"]["h"]
                             for p in dashboard["panels"] if p["type"] != "row")


def test_values_top_level_keys_are_unique() -> None:
    """YAML loaders keep the last of two equal keys silently: a section pasted twice would
    hide an edit to the first copy."""
    keys = re.findall(r"^([A-Za-z]\w*):", (CHART / "values.yaml").read_text(), re.MULTILINE)
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)
