"""The CRDs on a real kube-apiserver + etcd: what `kubectl` users actually meet.

Schema validation, CEL rules, defaulting, pruning, printer columns and the status
subresource are all the API server's doing, so only a real one can show they work.
The session fixture `kube_env` (tests/integration/conftest.py) has applied `crds/`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from ultraplane.resources import TrainingJob, UltraServer

pytestmark = pytest.mark.kube

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "invalid_manifests"
# Every examples/*.yaml is a manifest: `kubectl apply -f examples/` applies them all
# (`--cluster` files live in examples/clusters/, which kubectl does not descend into).
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def _corpus() -> list[tuple[Path, str]]:
    cases = []
    for path in sorted(CORPUS.glob("*.yaml")):
        head = dict(
            line[2:].split(": ", 1)
            for line in path.read_text().splitlines()
            if line.startswith("# ")
        )
        cases.append((path, head["expect"]))
    return cases


def _apply(kube: Any, ns: str, doc: dict[str, Any] | str, *extra: str, check: bool = True) -> Any:
    text = doc if isinstance(doc, str) else yaml.safe_dump(doc)
    return kube.kubectl("apply", "-n", ns, *extra, "-f", "-", input=text, check=check)


def _get(kube: Any, ns: str, kind: str, name: str) -> dict[str, Any]:
    out = kube.kubectl("get", "-n", ns, kind, name, "-o", "json").stdout
    return json.loads(out)  # type: ignore[no-any-return]


def _patch_status(kube: Any, ns: str, kind: str, name: str, status: dict[str, Any]) -> None:
    kube.kubectl(
        "patch", "-n", ns, kind, name, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip


def _subset(want: Any, got: Any) -> bool:
    """`got` holds everything of `want` (the server may add defaults, nothing else)."""
    if isinstance(want, dict):
        return isinstance(got, dict) and all(
            k in got and _subset(v, got[k]) for k, v in want.items()
        )
    return bool(want == got)


def _job(name: str, chips: int = 4, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ultraplane.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {"chips": chips, "work": {"durationSeconds": 3600}, **spec},
    }


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_applies(kube_env: Any, kube_namespace: str, path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    out = _apply(kube_env, kube_namespace, path.read_text()).stdout
    try:
        for doc in docs:
            name = doc["metadata"]["name"]
            assert f"{doc['kind'].lower()}.ultraplane.dev/{name}" in out
            stored = _get(kube_env, kube_namespace, doc["kind"].lower(), name)
            # What the example says is what the server kept (defaults only add fields).
            assert _subset(doc["spec"], stored["spec"]), f"{path.name}: {stored['spec']}"
    finally:
        if docs[0]["kind"] == "UltraServer":
            names = [f"ultraserver/{d['metadata']['name']}" for d in docs]
            kube_env.kubectl("delete", *names, "--wait=false", "--ignore-not-found", check=False)


def test_kubectl_apply_f_examples_applies_the_whole_folder(
    kube_env: Any, kube_namespace: str
) -> None:
    # What the README tells a new user to do; a server-side dry run leaves nothing behind.
    out = kube_env.kubectl("apply", "--dry-run=server", "-n", kube_namespace,
                           "-f", str(ROOT / "examples")).stdout
    for path in EXAMPLES:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                assert f"{doc['kind'].lower()}.ultraplane.dev/{doc['metadata']['name']}" in out


def test_printer_columns_show_phase_chips_ultraservers_progress(
    kube_env: Any, kube_namespace: str
) -> None:
    _apply(kube_env, kube_namespace, _job("columns-demo", chips=288, profile="trn3-gen2"))
    _patch_status(
        kube_env, kube_namespace, "trainingjob", "columns-demo",
        {"phase": "Running", "progressPercent": 12.5,
         "allocation": {"ultraServers": ["gen2-0000", "gen2-0001"], "level": "network-1"}},
    )  # fmt: skip
    out = kube_env.kubectl("get", "-n", kube_namespace, "trainingjobs").stdout
    header, *rows = out.splitlines()
    assert header.split() == ["NAME", "PHASE", "CHIPS", "ULTRASERVERS", "PROGRESS", "AGE"]
    (row,) = [r for r in rows if r.startswith("columns-demo ")]
    assert row.split()[1:3] == ["Running", "288"]
    assert "gen2-0000" in row and "gen2-0001" in row and "12.5" in row


def test_ultraserver_and_inferencejob_columns(kube_env: Any, kube_namespace: str) -> None:
    us = {
        "apiVersion": "ultraplane.dev/v1alpha1",
        "kind": "UltraServer",
        "metadata": {"name": "columns-demo-us"},
        "spec": {"profile": "trn3-gen2", "schedulable": False},
    }
    _apply(kube_env, kube_namespace, us)
    try:
        _patch_status(
            kube_env, kube_namespace, "ultraserver", "columns-demo-us",
            {"capacity": {"chips": 144}, "free": {"chips": 140}, "utilization": 0.03,
             "powerWatts": 51000},
        )  # fmt: skip
        out = kube_env.kubectl("get", "ultraservers").stdout.splitlines()
        assert out[0].split() == [
            "NAME", "PROFILE", "CHIPS", "FREE", "UTILIZATION", "POWER", "SCHEDULABLE", "RESERVED", "AGE"
        ]  # fmt: skip
        (row,) = [r for r in out if r.startswith("columns-demo-us ")]
        assert row.split()[1:7] == ["trn3-gen2", "144", "140", "0.03", "51000", "false"]
    finally:
        kube_env.kubectl("delete", "ultraserver", "columns-demo-us", "--wait=false", check=False)
    # An empty list prints no table, so make one job first.
    _apply(kube_env, kube_namespace, (ROOT / "examples/inferencejob.yaml").read_text())
    _patch_status(kube_env, kube_namespace, "inferencejob", "chat-70b",
                  {"phase": "Running", "chips": 64, "tokensPerSecond": 20012.5,
                   "readyReplicas": 3})
    out = kube_env.kubectl("get", "-n", kube_namespace, "ij").stdout.splitlines()
    assert out[0].split() == ["NAME", "PHASE", "REPLICAS", "READY", "CHIPS", "CHIPS/REPLICA",
                              "TOKENS/S", "AGE"]
    # CHIPS is the job's size (4 replicas x 16), not one replica's.
    assert out[1].split()[1:6] == ["Running", "4", "3", "64", "16"]
    assert "20012.5" in out[1]


def test_category_lists_every_kind(kube_env: Any, kube_namespace: str) -> None:
    _apply(kube_env, kube_namespace, _job("category-demo"))
    _apply(kube_env, kube_namespace, (ROOT / "examples/inferencejob.yaml").read_text())
    us = {
        "apiVersion": "ultraplane.dev/v1alpha1",
        "kind": "UltraServer",
        "metadata": {"name": "category-demo-us"},
        "spec": {"profile": "trn3-gen2"},
    }
    _apply(kube_env, kube_namespace, us)
    try:
        out = kube_env.kubectl("get", "ultraplane", "-n", kube_namespace, "-o", "name").stdout
        assert "trainingjob.ultraplane.dev/category-demo" in out
        assert "inferencejob.ultraplane.dev/chat-70b" in out
        assert "ultraserver.ultraplane.dev/category-demo-us" in out
        short = kube_env.kubectl("get", "tj,ij,us", "-n", kube_namespace, "-o", "name").stdout
        assert "trainingjob.ultraplane.dev/category-demo" in short
    finally:
        kube_env.kubectl("delete", "ultraserver", "category-demo-us", "--wait=false", check=False)


def test_explain_teaches_the_api(kube_env: Any) -> None:
    # The OpenAPI v3 document of a new CRD is published a moment after it is Established.
    deadline = time.monotonic() + 60
    while True:
        res = kube_env.kubectl("explain", "trainingjob.spec.topology", check=False)
        if res.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stdout.split())
    assert "Topology constraints of the gang" in text
    assert "requiredLevel" in text and "wholeServers" in text
    level = kube_env.kubectl("explain", "trainingjob.spec.topology.requiredLevel").stdout
    assert "network-1 alias block" in " ".join(level.split())
    us = " ".join(kube_env.kubectl("explain", "ultraserver.spec.failedChips").stdout.split())
    assert "Broken chips as local refs" in us


@pytest.mark.parametrize(("path", "expect"), _corpus(), ids=lambda v: getattr(v, "stem", ""))
def test_invalid_manifest_is_rejected(
    kube_env: Any, kube_namespace: str, path: Path, expect: str
) -> None:
    res = _apply(kube_env, kube_namespace, path.read_text(), check=False)
    if res.returncode == 0:  # accepted by mistake: do not leave it behind for other tests
        kube_env.kubectl("delete", "-n", kube_namespace, "-f", str(path), check=False)
    assert res.returncode != 0, f"{path.name} was accepted"
    assert expect in res.stderr, res.stderr


def test_invalid_corpus_is_large_enough() -> None:
    assert len(_corpus()) >= 25


def test_status_through_the_main_resource_is_ignored(kube_env: Any, kube_namespace: str) -> None:
    _apply(kube_env, kube_namespace, _job("status-demo"))
    kube_env.kubectl(
        "patch", "-n", kube_namespace, "trainingjob", "status-demo", "--type=merge",
        "-p", json.dumps({"status": {"phase": "Succeeded"}, "metadata": {"labels": {"a": "b"}}}),
    )  # fmt: skip
    obj = _get(kube_env, kube_namespace, "trainingjob", "status-demo")
    assert obj["metadata"]["labels"] == {"a": "b"}  # the rest of the patch did land
    assert "phase" not in obj.get("status", {})
    _patch_status(kube_env, kube_namespace, "trainingjob", "status-demo", {"phase": "Pending"})
    kube_env.kubectl(
        "patch", "-n", kube_namespace, "trainingjob", "status-demo", "--subresource=status",
        "--type=merge", "-p", json.dumps({"spec": {"chips": 8}}),
    )  # fmt: skip
    obj = _get(kube_env, kube_namespace, "trainingjob", "status-demo")
    assert obj["status"]["phase"] == "Pending" and obj["spec"]["chips"] == 4


def test_unknown_fields_are_pruned(kube_env: Any, kube_namespace: str) -> None:
    doc = _job("prune-demo", topology={"requiredLevel": "rack", "bogus": 1})
    doc["spec"]["extraField"] = "x"
    _apply(kube_env, kube_namespace, doc, "--validate=false")
    spec = _get(kube_env, kube_namespace, "trainingjob", "prune-demo")["spec"]
    assert "extraField" not in spec and "bogus" not in spec["topology"]
    assert spec["topology"]["requiredLevel"] == "rack"
    _patch_status(
        kube_env, kube_namespace, "trainingjob", "prune-demo", {"phase": "Pending", "x": 1}
    )
    status = _get(kube_env, kube_namespace, "trainingjob", "prune-demo")["status"]
    assert status == {"phase": "Pending"}


def test_defaults_are_applied(kube_env: Any, kube_namespace: str) -> None:
    _apply(kube_env, kube_namespace, _job("defaults-demo"))
    spec = _get(kube_env, kube_namespace, "trainingjob", "defaults-demo")["spec"]
    assert spec == {
        "chips": 4, "work": {"durationSeconds": 3600}, "topology": {"wholeServers": False},
        "priority": 0, "preemptible": True, "precision": "BF16",
        "checkpointIntervalSeconds": 600, "failurePolicy": "RestartAll",
    }  # fmt: skip
    ij = {
        "apiVersion": "ultraplane.dev/v1alpha1", "kind": "InferenceJob",
        "metadata": {"name": "defaults-demo"},
        "spec": {"chipsPerReplica": 4, "model": {"name": "m"}, "load": {"tokensPerSecond": 10}},
    }  # fmt: skip
    _apply(kube_env, kube_namespace, ij)
    spec = _get(kube_env, kube_namespace, "inferencejob", "defaults-demo")["spec"]
    assert spec["replicas"] == 1 and spec["precision"] == "BF16" and spec["priority"] == 0


def test_spec_is_editable_while_pending_and_frozen_once_admitted(
    kube_env: Any, kube_namespace: str
) -> None:
    ns, name = kube_namespace, "immutable-demo"
    _apply(kube_env, ns, _job(name, chips=4))
    _apply(kube_env, ns, _job(name, chips=8))  # no status yet: editable
    _patch_status(kube_env, ns, "trainingjob", name, {"phase": "Pending", "queuePosition": 3})
    _apply(kube_env, ns, _job(name, chips=12))  # Pending: editable
    assert _get(kube_env, ns, "trainingjob", name)["spec"]["chips"] == 12

    _patch_status(kube_env, ns, "trainingjob", name, {"phase": "Admitted"})
    res = _apply(kube_env, ns, _job(name, chips=16), check=False)
    assert res.returncode != 0
    assert "spec is immutable once the job is Admitted" in res.stderr
    assert _get(kube_env, ns, "trainingjob", name)["spec"]["chips"] == 12

    # Metadata and status still move: the operator and the simulator keep working.
    kube_env.kubectl("label", "-n", ns, "trainingjob", name, "team=research")
    _patch_status(kube_env, ns, "trainingjob", name, {"phase": "Running", "progressPercent": 1.0})
    obj = _get(kube_env, ns, "trainingjob", name)
    assert obj["status"]["phase"] == "Running" and obj["metadata"]["labels"]["team"] == "research"
    res = _apply(kube_env, ns, _job(name, chips=12, priority=5), check=False)
    assert res.returncode != 0 and "once the job is Running" in res.stderr


def test_inferencejob_spec_is_frozen_once_admitted_but_for_replicas(
    kube_env: Any, kube_namespace: str
) -> None:
    ns, name = kube_namespace, "ij-immutable-demo"
    doc = yaml.safe_load((ROOT / "examples/inferencejob.yaml").read_text())
    doc["metadata"]["name"] = name
    _apply(kube_env, ns, doc)
    _patch_status(kube_env, ns, "inferencejob", name,
                  {"phase": "Admitted", "replicas": 4, "selector": "ultraplane.dev/job-uid=x"})
    doc["spec"]["replicas"] = 8  # the one field that moves once admitted
    _apply(kube_env, ns, doc)
    assert _get(kube_env, ns, "inferencejob", name)["spec"]["replicas"] == 8
    doc["spec"]["priority"] = 60
    res = _apply(kube_env, ns, doc, check=False)
    assert res.returncode != 0 and "spec is immutable once the job is Admitted" in res.stderr
    assert "except spec.replicas" in res.stderr
    removed = {**doc, "spec": {k: v for k, v in doc["spec"].items() if k != "latencySLO"}}
    res = _apply(kube_env, ns, removed, check=False)  # a field dropped is a change too
    assert res.returncode != 0 and "spec is immutable" in res.stderr

    # The scale subresource: what `kubectl scale`, an HPA and KEDA read and write.
    kube_env.kubectl("scale", "-n", ns, "inferencejob", name, "--replicas=3")
    assert _get(kube_env, ns, "inferencejob", name)["spec"]["replicas"] == 3
    scale = json.loads(kube_env.kubectl(
        "get", "--raw", f"/apis/ultraplane.dev/v1alpha1/namespaces/{ns}/inferencejobs/{name}/scale"
    ).stdout)
    assert scale["kind"] == "Scale" and scale["spec"] == {"replicas": 3}
    assert scale["status"] == {"replicas": 4, "selector": "ultraplane.dev/job-uid=x"}
    for bad, said in (("0", "should be greater than or equal to 1"),
                      ("10001", "should be less than or equal to 10000")):
        res = kube_env.kubectl("scale", "-n", ns, "inferencejob", name, f"--replicas={bad}",
                               check=False)
        assert res.returncode != 0 and said in res.stderr, res.stderr


def test_inferencejob_replicas_stay_within_autoscaling_max(
    kube_env: Any, kube_namespace: str
) -> None:
    ns, name = kube_namespace, "ij-autoscaled"
    doc = yaml.safe_load((ROOT / "examples/inferencejob.yaml").read_text())
    doc["metadata"]["name"] = name
    doc["spec"]["autoscaling"] = {"minReplicas": 2, "maxReplicas": 6,
                                  "objective": {"timeToFirstTokenMs": 500,
                                                "timePerOutputTokenMs": 40}}
    _apply(kube_env, ns, doc)
    _patch_status(kube_env, ns, "inferencejob", name, {"phase": "Running"})
    kube_env.kubectl("scale", "-n", ns, "inferencejob", name, "--replicas=6")
    res = kube_env.kubectl("scale", "-n", ns, "inferencejob", name, "--replicas=7", check=False)
    assert res.returncode != 0
    assert "spec.replicas must be at most spec.autoscaling.maxReplicas" in res.stderr
    assert _get(kube_env, ns, "inferencejob", name)["spec"]["replicas"] == 6


# --- the CEL rules and their pydantic twins agree (random specs, server-side dry run) --------

_LEVELS = [None, "server", "rack", "ultraserver", "network-1", "block", "cluster"]
_PROFILES = [None, "trn2", "trn3-gen1", "trn3-gen2", "trn4-projected"]
_TWINS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _server_accepts(kube: Any, ns: str, doc: dict[str, Any]) -> bool:
    res = _apply(kube, ns, doc, "--dry-run=server", check=False)
    assert res.returncode == 0 or "is invalid" in res.stderr, res.stderr
    return bool(res.returncode == 0)


@_TWINS
@given(
    chips=st.sampled_from([1, 3, 4, 8, 16, 17, 64, 65, 72, 73, 144, 145, 288]),
    profile=st.sampled_from(_PROFILES),
    required=st.sampled_from(_LEVELS),
    preferred=st.sampled_from(_LEVELS),
    whole=st.booleans(),
)
def test_trainingjob_rules_agree_with_the_models(
    kube_env: Any,
    kube_namespace: str,
    chips: int,
    profile: str | None,
    required: str | None,
    preferred: str | None,
    whole: bool,
) -> None:
    topology: dict[str, Any] = {"wholeServers": whole}
    if required:
        topology["requiredLevel"] = required
    if preferred:
        topology["preferredLevel"] = preferred
    doc = _job("twin", chips=chips, topology=topology, **({"profile": profile} if profile else {}))
    try:
        TrainingJob.model_validate(doc)
        model_ok = True
    except ValidationError:
        model_ok = False
    assert _server_accepts(kube_env, kube_namespace, doc) == model_ok, doc


@_TWINS
@given(
    profile=st.sampled_from(_PROFILES[1:]),
    servers=st.one_of(st.none(), st.integers(1, 36)),
    failed=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 17)), max_size=3),
    cordoned=st.lists(st.integers(0, 40), max_size=3, unique=True),
    racks=st.integers(0, 3),
)
def test_ultraserver_rules_agree_with_the_models(
    kube_env: Any,
    kube_namespace: str,
    profile: str,
    servers: int | None,
    failed: list[tuple[int, int]],
    cordoned: list[int],
    racks: int,
) -> None:
    spec: dict[str, Any] = {
        "profile": profile,
        "failedChips": sorted({f"s{s:02d}/c{c:02d}" for s, c in failed}),
        "cordonedServers": cordoned,
        "racks": [f"r{i}" for i in range(racks)],
    }
    if servers:
        spec["servers"] = servers
    doc = {
        "apiVersion": "ultraplane.dev/v1alpha1",
        "kind": "UltraServer",
        "metadata": {"name": "twin-us"},
        "spec": spec,
    }
    try:
        UltraServer.model_validate(doc)
        model_ok = True
    except ValidationError:
        model_ok = False
    assert _server_accepts(kube_env, kube_namespace, doc) == model_ok, doc


# --- the pod template: Kubernetes' own schema, our rules --------------------------------------

_TEMPLATE = {"metadata": {"labels": {"team": "llm"}},
             "spec": {"containers": [{"name": "train", "image": "busybox:1.36",
                                      "command": ["sh", "-c", "env"],
                                      "resources": {"limits": {"memory": "1Gi"}}}]}}


def test_explain_shows_the_pod_template_as_kubernetes_documents_it(kube_env: Any) -> None:
    deadline = time.monotonic() + 60
    while True:
        res = kube_env.kubectl("explain", "trainingjob.spec.template.spec.containers.resources",
                               check=False)
        if res.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stdout.split())
    assert "Compute Resources required by this container" in text  # Kubernetes' own words
    assert "limits" in text and "requests" in text
    top = " ".join(kube_env.kubectl("explain", "inferencejob.spec.template").stdout.split())
    assert "Pod template of the workload" in top


def test_a_job_with_a_template_keeps_it_and_freezes_it_once_admitted(
    kube_env: Any, kube_namespace: str
) -> None:
    _apply(kube_env, kube_namespace, _job("tmpl-demo", template=_TEMPLATE))
    got = _get(kube_env, kube_namespace, "trainingjob", "tmpl-demo")
    container = got["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"memory": "1Gi"}
    assert got["spec"]["template"]["metadata"]["labels"] == {"team": "llm"}
    _patch_status(kube_env, kube_namespace, "trainingjob", "tmpl-demo", {"phase": "Admitted"})
    changed = {**_TEMPLATE, "spec": {"containers": [{"name": "train", "image": "busybox:1.37"}]}}
    res = _apply(kube_env, kube_namespace, _job("tmpl-demo", template=changed), check=False)
    assert res.returncode != 0 and "spec is immutable once the job is Admitted" in res.stderr


def test_a_container_without_a_name_is_refused_by_kubernetes_schema(
    kube_env: Any, kube_namespace: str
) -> None:
    bad = {"spec": {"containers": [{"image": "busybox"}]}}
    res = _apply(kube_env, kube_namespace, _job("tmpl-bad", template=bad), check=False)
    assert res.returncode != 0
    assert "spec.template.spec.containers[0].name: Required value" in res.stderr
