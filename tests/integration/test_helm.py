"""The Helm chart, checked with a real helm binary and a real API server.

Three layers, cheapest first:
  1. `helm lint --strict` and `helm template` with default and non-default values, then
     assertions on the rendered YAML (the helm-unittest style, in Python): no wildcard RBAC,
     hardened securityContext everywhere, two operator replicas with peering, the simulator
     toggle, every reference (ServiceAccount, Service port, PDB selector) pointing at
     something that is rendered.
  2. The rendered manifests applied with `kubectl apply --server-side --dry-run=server` to the
     real kube-apiserver tier, so the API server's own validation judges every field.
  3. `helm install` into that tier and a check that every object of the release exists. The
     tier has no nodes, so the pods never run: kind e2e (tests/e2e) covers that.

helm comes from hack/helm.sh (built once from the Go module proxy and cached).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

# The first test builds helm (hack/helm.sh) when it is not cached yet: minutes on 2 cores.
pytestmark = [pytest.mark.kube, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "ultraplane"
COMPONENTS = ("operator", "simulator", "api")

# Values that change every optional branch of the templates at once.
NON_DEFAULT: dict[str, Any] = {
    "fullnameOverride": "up",
    "image": {"repository": "registry.example/ultraplane", "tag": "1.2.3"},
    "commonLabels": {"team": "ml-infra"},
    "operator": {"replicas": 3, "watchNamespaces": ["team-a", "team-b"], "extraArgs": ["--verbose"],
                 "ultraserversFromNodes": True},
    "simulator": {"enabled": False},
    "api": {
        "replicas": 2,
        "auth": {"tokenReview": True, "existingSecret": "api-tokens"},
        "database": {"existingSecret": "api-db"},
        "service": {"type": "NodePort"},
    },
    "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
    "devicePlugin": {"enabled": True, "ultraserverLabel": "example.com/ultraserver",
                     "resyncSeconds": 5, "extraArgs": ["--verbose"]},
}


# --- helm -------------------------------------------------------------------------------------


@functools.cache
def helm_binary() -> str:
    """The helm binary from hack/helm.sh; without Go it is a skip, unless CI requires the tier."""
    required = os.environ.get("ULTRAPLANE_REQUIRE_ENVTEST") == "1"
    if shutil.which("go") is None and not required:
        pytest.skip("Go is not installed, so hack/helm.sh cannot build helm")
    result = subprocess.run(
        [str(ROOT / "hack" / "helm.sh")], capture_output=True, text=True, timeout=1800
    )
    if result.returncode != 0:
        pytest.fail(f"hack/helm.sh failed:\n{result.stderr[-3000:]}")
    return result.stdout.strip().splitlines()[-1]


def helm(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm_binary(), *args], capture_output=True, text=True, timeout=300, env=env
    )


def values_file(values: dict[str, Any], tmp_dir: Path) -> Path:
    path = tmp_dir / f"values-{uuid.uuid4().hex[:8]}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


@functools.cache
def _render(values_json: str, namespace: str) -> str:
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    args = ["template", "rel", str(CHART), "--namespace", namespace]
    values = json.loads(values_json)
    if values:
        args += ["-f", str(values_file(values, tmp))]
    result = helm(*args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def render_text(values: dict[str, Any] | None = None, namespace: str = "ultraplane-system") -> str:
    return _render(json.dumps(values or {}, sort_keys=True), namespace)


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(render_text(values)) if d]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def component(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [
        d for d in of_kind(docs, kind)
        if d["metadata"]["labels"].get("app.kubernetes.io/component") == name
    ]
    assert len(found) == 1, f"expected one {kind} for {name}, found {len(found)}"
    return found[0]


# --- 1. lint and rendered-YAML assertions ----------------------------------------------------


@pytest.mark.parametrize("values", [{}, NON_DEFAULT], ids=["defaults", "non-defaults"])
def test_helm_lint_strict_passes(values: dict[str, Any], tmp_path: Path) -> None:
    args = ["lint", "--strict", str(CHART)]
    if values:
        args += ["-f", str(values_file(values, tmp_path))]
    result = helm(*args)
    assert result.returncode == 0, result.stdout + result.stderr


def test_chart_crds_are_identical_copies_of_crds_folder() -> None:
    source = {p.name: p.read_bytes() for p in (ROOT / "crds").glob("*.yaml")}
    chart = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    assert source, "crds/ holds no CRD YAML"
    assert sorted(chart) == sorted(source), "run hack/sync-chart-crds.sh"
    for name, data in source.items():
        assert chart[name] == data, f"helm/ultraplane/crds/{name} differs: run hack/sync-chart-crds.sh"


@pytest.mark.parametrize("values", [{}, NON_DEFAULT], ids=["defaults", "non-defaults"])
def test_rbac_has_no_wildcards(values: dict[str, Any]) -> None:
    docs = render(values)
    roles = of_kind(docs, "ClusterRole") + of_kind(docs, "Role")
    assert roles
    for role in roles:
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(field, []), f"{role['metadata']['name']}: {field} {rule}"
            assert "nonResourceURLs" not in rule


def allowed(docs: list[dict[str, Any]], who: str, group: str, resource: str, verb: str) -> bool:
    """Whether the ServiceAccount of component `who` is granted `verb` on group/resource."""
    sa = component(docs, "Deployment", who)["spec"]["template"]["spec"]["serviceAccountName"]
    for binding in of_kind(docs, "ClusterRoleBinding") + of_kind(docs, "RoleBinding"):
        if not any(s["kind"] == "ServiceAccount" and s["name"] == sa for s in binding["subjects"]):
            continue
        role_kind, role_name = binding["roleRef"]["kind"], binding["roleRef"]["name"]
        role = next(d for d in of_kind(docs, role_kind) if d["metadata"]["name"] == role_name)
        for rule in role["rules"]:
            if group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]:
                return True
    return False


# (component, api group, resource, verb, granted by default?)
PERMISSIONS = [
    ("operator", "ultraplane.dev", "trainingjobs", "watch", True),
    ("operator", "ultraplane.dev", "trainingjobs/status", "patch", True),
    ("operator", "ultraplane.dev", "inferencejobs/status", "patch", True),
    ("operator", "ultraplane.dev", "inferencejobs", "get", True),
    ("operator", "ultraplane.dev", "inferencejobs", "list", True),
    ("operator", "ultraplane.dev", "inferencejobs", "watch", True),
    ("operator", "ultraplane.dev", "inferencejobs", "patch", True),
    ("operator", "ultraplane.dev", "ultraservers/status", "patch", True),
    ("operator", "ultraplane.dev", "tenantqueues", "watch", True),
    ("operator", "ultraplane.dev", "tenantqueues/status", "patch", True),
    ("operator", "ultraplane.dev", "tenantqueues", "create", False),
    ("operator", "ultraplane.dev", "tenantcohorts", "watch", True),
    ("operator", "ultraplane.dev", "tenantcohorts/status", "patch", True),
    ("operator", "ultraplane.dev", "powerbudgets", "watch", True),
    ("operator", "ultraplane.dev", "powerbudgets/status", "patch", True),
    ("operator", "ultraplane.dev", "powerbudgets", "delete", False),
    ("operator", "ultraplane.dev", "trainingjobs", "patch", True),
    ("operator", "", "events", "create", True),
    ("operator", "apiextensions.k8s.io", "customresourcedefinitions", "watch", True),
    ("operator", "", "namespaces", "list", False),
    ("operator", "", "nodes", "list", True),  # operator.launchPods (the server -> Node map)
    ("operator", "", "nodes", "watch", True),
    ("operator", "", "pods", "create", True),
    ("operator", "", "pods", "delete", True),
    ("operator", "", "pods", "watch", True),
    ("operator", "", "pods", "update", False),
    ("operator", "", "services", "create", True),
    ("operator", "", "services", "list", False),
    ("operator", "", "secrets", "list", False),
    ("simulator", "", "pods", "create", False),
    ("api", "", "pods", "create", False),
    ("operator", "ultraplane.dev", "ultraservers", "create", False),
    ("operator", "ultraplane.dev", "ultraservers", "delete", False),
    ("operator", "ultraplane.dev", "trainingjobs", "delete", False),
    ("operator", "ultraplane.dev", "trainingjobs", "create", False),
    ("operator", "coordination.k8s.io", "leases", "create", True),
    ("operator", "coordination.k8s.io", "leases", "patch", True),
    ("operator", "coordination.k8s.io", "leases", "delete", False),
    ("simulator", "coordination.k8s.io", "leases", "get", False),
    ("operator", "", "secrets", "get", False),
    ("simulator", "ultraplane.dev", "trainingjobs", "list", True),
    ("simulator", "ultraplane.dev", "ultraservers", "list", True),
    ("simulator", "ultraplane.dev", "trainingjobs/status", "patch", True),
    ("simulator", "ultraplane.dev", "ultraservers/status", "patch", True),
    ("simulator", "ultraplane.dev", "trainingjobs", "patch", False),
    ("simulator", "ultraplane.dev", "ultraservers", "delete", False),
    ("simulator", "", "events", "create", False),
    ("api", "ultraplane.dev", "trainingjobs", "create", True),
    ("api", "ultraplane.dev", "inferencejobs", "delete", True),
    ("api", "ultraplane.dev", "inferencejobs/scale", "patch", True),  # PATCH of replicas
    ("api", "ultraplane.dev", "inferencejobs", "patch", False),  # nothing else of the spec
    ("api", "ultraplane.dev", "ultraservers", "list", True),
    ("api", "ultraplane.dev", "tenantqueues", "list", True),
    ("api", "ultraplane.dev", "tenantqueues", "patch", False),
    ("api", "ultraplane.dev", "powerbudgets", "list", True),
    ("api", "ultraplane.dev", "trainingjobs", "list", True),
    ("api", "ultraplane.dev", "trainingjobs", "watch", False),
    ("api", "ultraplane.dev", "trainingjobs/status", "patch", False),
    ("api", "ultraplane.dev", "ultraservers", "delete", False),
    ("api", "authentication.k8s.io", "tokenreviews", "create", True),
    ("api", "authorization.k8s.io", "subjectaccessreviews", "create", True),
    ("api", "rbac.authorization.k8s.io", "rolebindings", "list", False),
    ("operator", "authorization.k8s.io", "subjectaccessreviews", "create", False),
]


@pytest.mark.parametrize(("who", "group", "resource", "verb", "granted"), PERMISSIONS)
def test_each_component_gets_exactly_the_access_it_needs(
    who: str, group: str, resource: str, verb: str, granted: bool
) -> None:
    assert allowed(render(), who, group, resource, verb) is granted


def test_token_review_grants_tokenreviews_to_the_api_only() -> None:
    docs = render()  # on by default: the API authorizes every job request for its caller
    assert allowed(docs, "api", "authentication.k8s.io", "tokenreviews", "create")
    assert not allowed(docs, "operator", "authentication.k8s.io", "tokenreviews", "create")
    api = component(docs, "Deployment", "api")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "ULTRAPLANE_TOKEN_REVIEW", "value": "true"} in api["env"]
    assert {"name": "ULTRAPLANE_MAX_BODY_BYTES", "value": "1048576"} in api["env"]
    # Only `create` on the two review kinds: no other verb, no other authn/authz resource.
    role = next(r for r in of_kind(docs, "ClusterRole")
                if r["metadata"]["labels"]["app.kubernetes.io/component"] == "api")
    reviews = [r for r in role["rules"] if set(r["apiGroups"]) & {
        "authentication.k8s.io", "authorization.k8s.io"}]
    assert sorted((r["resources"], r["verbs"]) for r in reviews) == [
        (["subjectaccessreviews"], ["create"]), (["tokenreviews"], ["create"])]
    off = render({"api": {"auth": {"tokenReview": False}}})
    assert not allowed(off, "api", "authorization.k8s.io", "subjectaccessreviews", "create")
    container = component(off, "Deployment", "api")["spec"]["template"]["spec"]["containers"][0]
    assert "ULTRAPLANE_TOKEN_REVIEW" not in {e["name"] for e in container["env"]}


def test_api_network_policy_admits_only_the_api_port_from_listed_peers() -> None:
    docs = render()
    policy = component(docs, "NetworkPolicy", "api")
    pod = component(docs, "Deployment", "api")["spec"]["template"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert rule["from"] == [{"podSelector": {}}]  # this namespace's pods only
    peer = {"namespaceSelector": {"matchLabels": {"name": "ingress"}}}
    wider = render({"api": {"networkPolicy": {"fromNamespaceSelector": {"matchLabels": {
        "team": "ml"}}, "from": [peer]}}})
    assert component(wider, "NetworkPolicy", "api")["spec"]["ingress"][0]["from"] == [
        {"namespaceSelector": {"matchLabels": {"team": "ml"}}}, peer]
    assert not of_kind(render({"api": {"networkPolicy": {"enabled": False}}}), "NetworkPolicy")


@pytest.mark.parametrize("values", [{}, NON_DEFAULT], ids=["defaults", "non-defaults"])
def test_every_pod_is_hardened(values: dict[str, Any]) -> None:
    deployments = of_kind(render(values), "Deployment")
    assert deployments
    for deployment in deployments:
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == 65532
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        tmp_volumes = [v for v in pod["volumes"] if v["name"] == "tmp"]
        assert tmp_volumes and "emptyDir" in tmp_volumes[0]
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert "add" not in sc["capabilities"]
            assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]
            assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
            assert c["livenessProbe"] and c["startupProbe"]
            probe_port = c["livenessProbe"]["httpGet"]["port"]
            assert probe_port in {p["name"] for p in c["ports"]}


def test_operator_runs_two_replicas_with_one_active_and_a_budget() -> None:
    docs = render()
    operator = component(docs, "Deployment", "operator")
    assert operator["spec"]["replicas"] == 2
    args = operator["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["operator", "--all-namespaces"] and "--standalone" not in args
    assert args[args.index("--peering") + 1] == "ultraplane-operator"
    assert args[args.index("--lease-namespace") + 1] == "ultraplane-system"
    assert args[args.index("--liveness") + 1] == "http://0.0.0.0:8080/healthz"
    pdb = component(docs, "PodDisruptionBudget", "operator")
    assert pdb["spec"]["minAvailable"] == 1
    pod_labels = operator["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    # The election Lease: create any (its name is not known before it exists), then get and
    # patch only that one, only in the release namespace.
    lease_role = component(docs, "Role", "operator")
    assert lease_role["metadata"]["namespace"] == "ultraplane-system"
    assert lease_role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "resourceNames": ["ultraplane-operator"], "verbs": ["get", "patch"]},
    ]
    assert component(docs, "RoleBinding", "operator")["roleRef"]["name"] == lease_role["metadata"]["name"]


def test_one_operator_replica_may_run_standalone_without_lease_or_budget() -> None:
    docs = render({"operator": {"replicas": 1, "leaderElection": {"enabled": False}}})
    args = component(docs, "Deployment", "operator")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--standalone" in args and "--peering" not in args
    assert not of_kind(docs, "PodDisruptionBudget")
    assert not of_kind(docs, "Role") and not of_kind(docs, "RoleBinding")


def test_watching_listed_namespaces_adds_namespace_access_only_then() -> None:
    docs = render(NON_DEFAULT)
    args = component(docs, "Deployment", "operator")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:5] == ["operator", "--namespace", "team-a", "--namespace", "team-b"]
    assert "--all-namespaces" not in args
    assert allowed(docs, "operator", "", "namespaces", "watch")
    assert not allowed(render(), "operator", "", "namespaces", "watch")


def test_ultraservers_from_nodes_adds_node_watch_and_ultraserver_writes_only_then() -> None:
    docs = render({"operator": {"ultraserversFromNodes": True}})
    args = component(docs, "Deployment", "operator")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--ultraservers-from-nodes" in args
    for verb in ("list", "watch"):
        assert allowed(docs, "operator", "", "nodes", verb)
    for verb in ("create", "patch", "delete"):
        assert allowed(docs, "operator", "ultraplane.dev", "ultraservers", verb)
    # Still least privilege: Nodes are only read, and no other component gains anything.
    for verb in ("get", "patch", "update", "delete", "create"):
        assert not allowed(docs, "operator", "", "nodes", verb)
    assert not allowed(docs, "operator", "ultraplane.dev", "trainingjobs", "create")
    for who in ("simulator", "api"):
        assert not allowed(docs, who, "", "nodes", "watch")
        assert not allowed(docs, who, "ultraplane.dev", "ultraservers", "create")
    default = render({"operator": {"launchPods": False}})
    default_args = component(default, "Deployment", "operator")["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert "--ultraservers-from-nodes" not in default_args
    assert not allowed(default, "operator", "", "nodes", "watch")


def test_launch_pods_is_on_by_default_with_its_rbac_and_can_be_turned_off() -> None:
    docs = render()
    args = component(docs, "Deployment", "operator")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--launch-pods" in args
    assert args[args.index("--pod-grace-seconds") + 1] == "120"
    assert args[args.index("--launch-backlog-seconds") + 1] == "2"
    assert args[args.index("--cluster-domain") + 1] == "svc.cluster.local"
    for verb in ("create", "delete", "patch", "list", "watch"):
        assert allowed(docs, "operator", "", "pods", verb)
    off = render({"operator": {"launchPods": False, "podGraceSeconds": 600}})
    off_args = component(off, "Deployment", "operator")["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert "--no-launch-pods" in off_args and "--pod-grace-seconds" not in off_args
    assert "--launch-backlog-seconds" not in off_args
    never = render({"operator": {"launchBacklogSeconds": 0}})
    never_args = component(never, "Deployment", "operator")["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert never_args[never_args.index("--launch-backlog-seconds") + 1] == "0"
    for verb in ("create", "delete", "watch"):
        assert not allowed(off, "operator", "", "pods", verb)
    assert not allowed(off, "operator", "", "services", "create")


def test_reservation_is_on_by_default_and_can_be_turned_off() -> None:
    def args(values: dict[str, object] | None = None) -> list[str]:
        return component(render(values), "Deployment", "operator")["spec"]["template"]["spec"][
            "containers"][0]["args"]

    assert "--no-reservation" not in args()
    assert "--no-reservation" in args({"operator": {"reservation": False}})


def test_moves_are_on_by_default_and_can_be_turned_off() -> None:
    def args(values: dict[str, object] | None = None) -> list[str]:
        return component(render(values), "Deployment", "operator")["spec"]["template"]["spec"][
            "containers"][0]["args"]

    assert "--no-moves" not in args()
    assert "--no-moves" in args({"operator": {"moves": False}})


def test_queue_stretch_defaults_to_target_start_and_zero_is_arrival_order() -> None:
    def stretch(values: dict[str, object] | None = None) -> str:
        args = component(render(values), "Deployment", "operator")["spec"]["template"]["spec"][
            "containers"][0]["args"]
        return str(args[args.index("--queue-stretch") + 1])

    assert stretch() == "10"
    assert stretch({"operator": {"queueStretch": 0}}) == "0"
    assert stretch({"operator": {"queueStretch": 2.5}}) == "2.5"


def test_two_operator_replicas_without_leader_election_is_refused() -> None:
    result = helm("template", "rel", str(CHART), "--set", "operator.replicas=2",
                  "--set", "operator.leaderElection.enabled=false")
    assert result.returncode != 0
    assert "operator.leaderElection.enabled must be true" in result.stderr


# (--set argument, the path helm's schema error must name) from values.schema.json.
BAD_VALUES = [
    ("operator.replicas=two", "/operator/replicas"),
    ("operator.replicas=0", "/operator/replicas"),
    ("operator.ultraserversFromNodes=maybe", "/operator/ultraserversFromNodes"),
    ("operator.reservation=sometimes", "/operator/reservation"),
    ("operator.queueStretch=-1", "/operator/queueStretch"),
    ("simulator.timeScale=0", "/simulator/timeScale"),
    ("simulator.metricsPort=70000", "/simulator/metricsPort"),
    ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
    ("api.service.type=Ingress", "/api/service/type"),
    ("api.servce.type=NodePort", "/api"),
    ("api.logLevel=loud", "/api/logLevel"),
    ("api.maxBodyBytes=10", "/api/maxBodyBytes"),
    ("metrics.serviceMonitor.interval=often", "/metrics/serviceMonitor/interval"),
]


@pytest.mark.parametrize(("setting", "path"), BAD_VALUES)
def test_bad_values_fail_with_the_field_named(setting: str, path: str) -> None:
    result = helm("template", "rel", str(CHART), "--set", setting)
    assert result.returncode != 0
    assert f"at '{path}'" in result.stderr, result.stderr


def names(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(d["kind"], d["metadata"]["name"]) for d in docs}


def test_turning_the_simulator_off_removes_all_of_it_and_nothing_else() -> None:
    on, off = render(), render({"simulator": {"enabled": False}})
    removed = names(on) - names(off)
    assert removed == {
        ("Deployment", "rel-ultraplane-simulator"),
        ("Service", "rel-ultraplane-simulator"),
        ("ServiceAccount", "rel-ultraplane-simulator"),
        ("ClusterRole", "rel-ultraplane-simulator"),
        ("ClusterRoleBinding", "rel-ultraplane-simulator"),
    }
    assert names(off) <= names(on)
    simulator = component(on, "Deployment", "simulator")
    args = simulator["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:5] == ["simulator", "--time-scale", "60", "--metrics-port", "9100"]


def test_every_reference_points_at_a_rendered_object() -> None:
    for values in ({}, NON_DEFAULT):
        docs = render(values)
        accounts = {d["metadata"]["name"] for d in of_kind(docs, "ServiceAccount")}
        for deployment in of_kind(docs, "Deployment"):
            pod = deployment["spec"]["template"]
            assert pod["spec"]["serviceAccountName"] in accounts
            selector = deployment["spec"]["selector"]["matchLabels"]
            assert selector.items() <= pod["metadata"]["labels"].items()
        for binding in of_kind(docs, "ClusterRoleBinding"):
            assert {s["name"] for s in binding["subjects"]} <= accounts
            assert binding["roleRef"]["name"] in {
                d["metadata"]["name"] for d in of_kind(docs, binding["roleRef"]["kind"])
            }
        for service in of_kind(docs, "Service"):
            targets = [
                d for d in of_kind(docs, "Deployment")
                if service["spec"]["selector"].items()
                <= d["spec"]["template"]["metadata"]["labels"].items()
            ]
            assert len(targets) == 1, service["metadata"]["name"]
            ports = {p["name"] for p in targets[0]["spec"]["template"]["spec"]["containers"][0]["ports"]}
            assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports


def test_image_defaults_to_app_version_and_can_be_overridden() -> None:
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    for values, image in (({}, f"ultraplane:{app_version}"),
                          (NON_DEFAULT, "registry.example/ultraplane:1.2.3")):
        for deployment in of_kind(render(values), "Deployment"):
            assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == image


def test_api_serves_the_cluster_with_optional_token_file_and_database() -> None:
    default = component(render(), "Deployment", "api")["spec"]["template"]["spec"]
    args = default["containers"][0]["args"]
    assert args[:3] == ["serve", "--backend", "kubernetes"] and "--token-file" not in args
    db = next(e for e in default["containers"][0]["env"] if e["name"] == "ULTRAPLANE_DB")
    assert db["value"].startswith("sqlite:////tmp/")

    docs = render(NON_DEFAULT)
    pod = component(docs, "Deployment", "api")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    token_file = container["args"][container["args"].index("--token-file") + 1]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "tokens")
    assert token_file.startswith(mount["mountPath"] + "/") and mount["readOnly"] is True
    volume = next(v for v in pod["volumes"] if v["name"] == "tokens")
    assert volume["secret"]["secretName"] == "api-tokens"
    db = next(e for e in container["env"] if e["name"] == "ULTRAPLANE_DB")
    assert db["valueFrom"]["secretKeyRef"] == {"name": "api-db", "key": "url"}
    assert component(docs, "PodDisruptionBudget", "api")["spec"]["minAvailable"] == 1
    assert component(docs, "Service", "api")["spec"]["type"] == "NodePort"


def test_service_monitors_are_optional_and_scrape_rendered_ports() -> None:
    assert not of_kind(render(), "ServiceMonitor")
    values = {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}}
    docs = render(values)
    monitors = of_kind(docs, "ServiceMonitor")
    assert {m["metadata"]["labels"]["app.kubernetes.io/component"] for m in monitors} == {
        "api", "simulator"}
    for monitor in monitors:
        assert monitor["metadata"]["labels"]["release"] == "prom"
        who = monitor["metadata"]["labels"]["app.kubernetes.io/component"]
        service = component(docs, "Service", who)
        assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}
    # Without the simulator only the API is scraped.
    assert len(of_kind(render(NON_DEFAULT), "ServiceMonitor")) == 1


def test_notes_name_the_api_service_and_warn_when_it_is_open() -> None:
    result = helm("install", "rel", str(CHART), "--dry-run=client", "--namespace", "ns1")
    assert result.returncode == 0, result.stderr
    assert "rel-ultraplane-api" in result.stdout and "no bearer tokens" not in result.stdout
    assert "SubjectAccessReview" in result.stdout
    result = helm("install", "rel", str(CHART), "--dry-run=client", "--namespace", "ns1",
                  "--set", "api.auth.tokenReview=false")
    assert result.returncode == 0, result.stderr
    assert "no bearer tokens" in result.stdout
    result = helm("install", "rel", str(CHART), "--dry-run=client", "--namespace", "ns1",
                  "--set", "api.auth.tokenReview=true", "--set", "simulator.enabled=false")
    assert result.returncode == 0, result.stderr
    assert "no bearer tokens" not in result.stdout and "simulator  off" in result.stdout


# --- the fake Neuron device plugin (devicePlugin.enabled) -----------------------------------

PLUGIN_DIR = "/var/lib/kubelet/device-plugins"


def plugin_pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return component(docs, "DaemonSet", "device-plugin")["spec"]["template"]


def plugin_grants(docs: list[dict[str, Any]]) -> list[tuple[list[str], list[str], list[str]]]:
    """(apiGroups, resources, verbs) of every rule bound to the plugin's ServiceAccount."""
    sa = plugin_pod(docs)["spec"]["serviceAccountName"]
    rules = []
    for binding in of_kind(docs, "ClusterRoleBinding") + of_kind(docs, "RoleBinding"):
        if any(s["kind"] == "ServiceAccount" and s["name"] == sa for s in binding["subjects"]):
            role = next(d for d in of_kind(docs, binding["roleRef"]["kind"])
                        if d["metadata"]["name"] == binding["roleRef"]["name"])
            rules += [(r["apiGroups"], r["resources"], r["verbs"]) for r in role["rules"]]
    return rules


def test_the_device_plugin_is_off_by_default_and_adds_only_its_own_objects() -> None:
    off, on = render(), render({"devicePlugin": {"enabled": True}})
    assert not of_kind(off, "DaemonSet")
    assert names(on) - names(off) == {
        ("DaemonSet", "rel-ultraplane-device-plugin"),
        ("ServiceAccount", "rel-ultraplane-device-plugin"),
        ("ClusterRole", "rel-ultraplane-device-plugin"),
        ("ClusterRoleBinding", "rel-ultraplane-device-plugin"),
    }
    assert names(off) <= names(on)


def test_the_device_plugin_runs_on_ultraserver_nodes_with_the_kubelets_directory() -> None:
    pod = plugin_pod(render({"devicePlugin": {"enabled": True}}))
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert container["args"] == ["simulator", "device-plugin", "--plugin-dir", PLUGIN_DIR,
                                 "--ultraserver-label", "ultraplane.dev/ultraserver",
                                 "--resync-seconds", "60"]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in \
        container["env"]
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "ultraplane.dev/ultraserver",
                                         "operator": "Exists"}]
    assert {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"} in \
        spec["tolerations"]
    host = [v for v in spec["volumes"] if "hostPath" in v]
    assert host == [{"name": "device-plugins",
                     "hostPath": {"path": PLUGIN_DIR, "type": "Directory"}}]
    assert {"name": "device-plugins", "mountPath": PLUGIN_DIR} in container["volumeMounts"]
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert spec["automountServiceAccountToken"] is True


@pytest.mark.parametrize("values", [{"enabled": True}, NON_DEFAULT["devicePlugin"],
                                    {"enabled": True, "chips": 4}],
                         ids=["defaults", "non-defaults", "fixed-chips"])
def test_the_device_plugin_is_root_only_for_the_socket_and_nothing_more(
        values: dict[str, Any]) -> None:
    spec = plugin_pod(render({"devicePlugin": values}))["spec"]
    # uid 0 for the root-owned directory and kubelet.sock; everything else is taken away.
    assert spec["securityContext"]["runAsUser"] == 0
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert not spec.get(key)
    (container,) = spec["containers"]
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["requests"]["cpu"] and container["resources"]["limits"]["memory"]
    assert [v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v] == [PLUGIN_DIR]


def test_the_device_plugin_may_only_get_nodes_and_nothing_with_a_fixed_count() -> None:
    docs = render({"devicePlugin": {"enabled": True}})
    assert plugin_grants(docs) == [([""], ["nodes"], ["get"])]
    fixed = render({"devicePlugin": {"enabled": True, "chips": 4}})
    assert plugin_grants(fixed) == []
    spec = plugin_pod(fixed)["spec"]
    assert spec["automountServiceAccountToken"] is False
    args = spec["containers"][0]["args"]
    assert args[args.index("--chips") + 1] == "4" and "--ultraserver-label" not in args
    zero = plugin_pod(render({"devicePlugin": {"enabled": True, "chips": 0}}))
    assert "--chips" in zero["spec"]["containers"][0]["args"]  # 0 is a count, not "unset"


def test_the_device_plugin_follows_a_custom_ultraserver_label_and_affinity() -> None:
    pod = plugin_pod(render(NON_DEFAULT))
    args = pod["spec"]["containers"][0]["args"]
    assert args[args.index("--ultraserver-label") + 1] == "example.com/ultraserver"
    assert args[-1] == "--verbose"
    term = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert term["matchExpressions"][0]["key"] == "example.com/ultraserver"
    own = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In",
                                                     "values": ["trn"]}]}]}}}
    custom = plugin_pod(render({"devicePlugin": {"enabled": True, "affinity": own}}))
    assert custom["spec"]["affinity"] == own


@pytest.mark.parametrize("values", [{"enabled": True}, {"enabled": True, "chips": 2},
                                    NON_DEFAULT["devicePlugin"]],
                         ids=["defaults", "fixed-chips", "non-defaults"])
def test_the_command_accepts_the_arguments_the_chart_renders(values: dict[str, Any]) -> None:
    from ultraplane.simulator.cli import device_plugin

    args = plugin_pod(render({"devicePlugin": values}))["spec"]["containers"][0]["args"]
    assert args[:2] == ["simulator", "device-plugin"]
    ctx = device_plugin.make_context("device-plugin", list(args[2:]))  # parses, runs nothing
    assert str(ctx.params["plugin_dir"]) == PLUGIN_DIR


@pytest.mark.parametrize(("setting", "path"), [
    ("devicePlugin.chips=65", "/devicePlugin/chips"),
    ("devicePlugin.chips=four", "/devicePlugin/chips"),
    ("devicePlugin.enabled=maybe", "/devicePlugin/enabled"),
    ("devicePlugin.hostPluginDir=relative/dir", "/devicePlugin/hostPluginDir"),
    ("devicePlugin.chip=4", "/devicePlugin"),
])
def test_bad_device_plugin_values_fail_with_the_field_named(setting: str, path: str) -> None:
    result = helm("template", "rel", str(CHART), "--set", setting)
    assert result.returncode != 0
    assert f"at '{path}'" in result.stderr, result.stderr


# --- 2 and 3. the real API server tier -------------------------------------------------------

TIER_VALUES = [{}, {k: v for k, v in NON_DEFAULT.items() if k != "metrics"}]


def kubectl(
    kube_env: Any, *args: str, check: bool = True, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(Path(kube_env.bin_dir) / "kubectl"), "--kubeconfig", str(kube_env.kubeconfig), *args],
        capture_output=True, text=True, timeout=120, env={**os.environ, **kube_env.env()},
        input=input,
    )
    if check:
        assert result.returncode == 0, f"kubectl {' '.join(args)}:\n{result.stdout}{result.stderr}"
    return result


@pytest.fixture
def chart_crds(kube_env: Any) -> Iterator[None]:
    """The chart's CRDs in the tier (server-side apply: idempotent if another test has them)."""
    kubectl(kube_env, "apply", "--server-side", "--force-conflicts", "-f", str(CHART / "crds"))
    kubectl(kube_env, "wait", "--for=condition=Established", "--timeout=60s", "-f", str(CHART / "crds"))
    yield


@pytest.mark.parametrize("values", TIER_VALUES, ids=["defaults", "non-defaults"])
def test_rendered_manifests_pass_server_side_dry_run(
    values: dict[str, Any], kube_env: Any, kube_namespace: str, chart_crds: None, tmp_path: Path
) -> None:
    manifest = tmp_path / "rendered.yaml"
    manifest.write_text(render_text(values, namespace=kube_namespace))
    result = kubectl(kube_env, "apply", "--server-side", "--dry-run=server", "-f", str(manifest))
    # One "kind.group/name serverside-applied (server dry run)" line per accepted object.
    accepted = {
        line.split()[0].rsplit("/", 1)[1]
        for line in result.stdout.splitlines() if "(server dry run)" in line
    }
    rendered = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    assert accepted == {d["metadata"]["name"] for d in rendered}, result.stdout
    assert len(result.stdout.strip().splitlines()) == len(rendered)


def test_helm_install_into_the_tier_creates_every_object(
    kube_env: Any, kube_namespace: str, tmp_path: Path
) -> None:
    release = f"up-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, **kube_env.env(), "KUBECONFIG": str(kube_env.kubeconfig),
           "HELM_CACHE_HOME": str(tmp_path / "cache"), "HELM_CONFIG_HOME": str(tmp_path / "config"),
           "HELM_DATA_HOME": str(tmp_path / "data")}
    # --force-conflicts: the session fixture may have applied the same CRDs with kubectl, and
    # helm 4 server-side applies them again (identical content, new field manager).
    result = helm("install", release, str(CHART), "--namespace", kube_namespace,
                  "--force-conflicts", env=env)
    assert result.returncode == 0, result.stderr
    try:
        status = helm("status", release, "--namespace", kube_namespace, "-o", "json", env=env)
        assert json.loads(status.stdout)["info"]["status"] == "deployed"
        manifest = helm("get", "manifest", release, "--namespace", kube_namespace, env=env).stdout
        objects = [d for d in yaml.safe_load_all(manifest) if d]
        assert {d["kind"] for d in objects} >= {
            "Deployment", "Service", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
            "PodDisruptionBudget"}
        for obj in objects:
            scope = ["-n", kube_namespace] if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding") else []
            got = kubectl(kube_env, "get", obj["kind"], obj["metadata"]["name"], *scope, "-o", "json")
            live = json.loads(got.stdout)
            assert live["metadata"]["labels"]["app.kubernetes.io/instance"] == release
        for crd in (CHART / "crds").glob("*.yaml"):
            name = yaml.safe_load(crd.read_text())["metadata"]["name"]
            kubectl(kube_env, "wait", "--for=condition=Established", "--timeout=60s", f"crd/{name}")
        operator = json.loads(kubectl(kube_env, "get", "deploy", "-n", kube_namespace, "-l",
                                      "app.kubernetes.io/component=operator", "-o", "json").stdout)
        assert operator["items"][0]["spec"]["replicas"] == 2
        # The API server's own RBAC evaluation agrees with the rendered-YAML table above. A
        # SubjectAccessReview, not `kubectl auth can-i`: that one cannot name the group of a
        # resource the server does not serve yet (the kopf peering CRD).
        for who, group, resource, verb, granted in PERMISSIONS:
            plural, _, subresource = resource.partition("/")
            review = {
                "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {
                    "user": f"system:serviceaccount:{kube_namespace}:{release}-ultraplane-{who}",
                    "resourceAttributes": {
                        "group": group, "resource": plural, "verb": verb, "subresource": subresource,
                        "namespace": kube_namespace,
                        # The lease Role names its one Lease (default leaderElection.name).
                        "name": "ultraplane-operator" if plural == "leases" else "",
                    },
                },
            }
            answer = kubectl(kube_env, "create", "-o", "json", "-f", "-", input=json.dumps(review))
            allowed_by_server = json.loads(answer.stdout)["status"].get("allowed", False)
            assert allowed_by_server is granted, (who, resource, verb)
    finally:
        helm("uninstall", release, "--namespace", kube_namespace, env=env)
