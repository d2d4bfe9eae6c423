"""Elastic InferenceJobs on the Trainium-like kind cluster (the workers are two 4-chip servers
of one UltraServer, with the fake Neuron device plugin, as in test_kind_pods.py).

The load is what a platform engineer would run: each replica's container is `ultraplane
model-server` (a simulated model server exporting vLLM's metrics of the requests it gets, on
its port named `metrics`), and a separate client pod, `ultraplane load-generator`, replays a
request trace from a ConfigMap over the addresses of the job's headless Service. The operator
(its planner every 2 s here, `operator.autoscaleSeconds`) scrapes the replica pods directly.
Stepping the load is replacing the client pod with one at another rate multiple.

Shown here: an autoscaled job without load keeps one replica; under x12 load it scales up, its new replica's pod lands on the Node
of its allocated server with that server's Neuron devices, the lower-priority training job
that held those chips is preempted and its status names the inference scale-up that took them,
and replica 0's pod keeps its UID; at x1 it scales down once the delay has passed, the training
job gets its chips back, and the one replica reads the whole x1 load. `kubectl scale` resizes a job without autoscaling, its kept
replicas' pods keep their UIDs, and its allocation always matches its replicas.
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import IMAGE
from tests.e2e.kinds import Kind, condition, held_chips, neuron_workers, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]

US = "kind-us-0"
NS = "e2e-serving"
NEURON = "aws.amazon.com/neuron"
RATE = 10  # requests/s of the trace: one replica of llama-3-8b on 4 chips holds it at x1
DELAY = 10  # scaleDownDelaySeconds
PORT = 8000


@pytest.fixture(scope="module")
def serving(release: Kind) -> Iterator[dict[int, str]]:
    """Server index -> Node, the planner every 2 s, and this module's namespace with the
    trace's ConfigMap; the namespace (and all in it) is deleted afterwards."""
    nodes = neuron_workers(release, US, "operator.autoscaleSeconds=2")
    release.kc("delete", "namespace", NS, "--ignore-not-found", "--wait", timeout=300)
    release.kc("create", "namespace", NS)
    release.apply(json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": "trace", "namespace": NS},
                              "data": {"trace.csv": steady_trace()}}))
    yield nodes
    release.kc("delete", "inferencejobs,trainingjobs", "--all", "-n", NS, "--wait", timeout=300)
    release.kc("delete", "namespace", NS, "--wait", timeout=300)


def steady_trace() -> str:
    """60 s of RATE requests/s, 3,000 prompt and 150 output tokens each (it loops)."""
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
    for i in range(RATE * 60):
        s = i / RATE
        w.writerow([f"2024-01-01 00:{int(s // 60):02d}:{s % 60:09.6f}", 3000, 150])
    return out.getvalue()


def container(args: list[str], *, serving_port: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "server" if serving_port else "client", "image": IMAGE,
                            "args": args}
    if serving_port:
        body["ports"] = [{"name": "metrics", "containerPort": PORT}]
        body["readinessProbe"] = {"httpGet": {"path": "/health", "port": PORT},
                                  "periodSeconds": 1}
    return body


def inference_job(name: str, *, replicas: int, chips: int, autoscaling: dict[str, Any] | None,
                  args: list[str]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicas": replicas, "chipsPerReplica": chips, "profile": "trn3-gen2", "priority": 100,
        "model": {"name": "llama-3-8b"},
        "template": {"spec": {"terminationGracePeriodSeconds": 2,
                              "containers": [container(args, serving_port=True)]}}}
    if autoscaling is None:
        spec["load"] = {"requestsPerSecond": RATE}
    else:  # no spec.load: the planner reads it from the model servers
        spec["autoscaling"] = autoscaling
        spec["topology"] = {"wholeServers": True}
    return {"apiVersion": "ultraplane.dev/v1alpha1", "kind": "InferenceJob",
            "metadata": {"name": name, "namespace": NS, "labels": {"e2e": "serving"}},
            "spec": spec}


def load_generator(kind: Kind, job: str, multiple: float) -> None:
    """The client pod, replaced by one offering the trace at `multiple` x its rate."""
    kind.kc("delete", "pod", "load", "-n", NS, "--ignore-not-found", "--wait", timeout=120)
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "load", "namespace": NS, "labels": {"e2e": "serving"}},
           "spec": {"terminationGracePeriodSeconds": 1,
                    "containers": [{**container(
                        ["load-generator", "--trace", "/trace/trace.csv", "--rate-steps",
                         f"0:{multiple}", "--target", f"{job}.{NS}.svc", "--port", str(PORT)],
                        serving_port=False),
                        "volumeMounts": [{"name": "trace", "mountPath": "/trace"}]}],
                    "volumes": [{"name": "trace", "configMap": {"name": "trace"}}]}}
    kind.apply(json.dumps(pod))
    wait_until("the load generator running", lambda: kind.get("pod", "load", "-n", NS)
               ["status"].get("phase") == "Running", timeout=180)


def get_job(kind: Kind, name: str, resource: str = "inferencejob") -> dict[str, Any]:
    body: dict[str, Any] = kind.get(resource, name, "-n", NS)
    return body


def replica_pods(kind: Kind, job: str) -> dict[int, dict[str, Any]]:
    """Replica index -> its live pod (one server per replica here)."""
    pods = [p for p in kind.items("pods", "-n", NS, "-l", f"ultraplane.dev/job-name={job}")
            if p["metadata"].get("deletionTimestamp") is None]
    by = {int(p["metadata"]["labels"]["ultraplane.dev/group"]): p for p in pods}
    assert len(by) == len(pods), f"two live pods of one replica: {[p['metadata']['name'] for p in pods]}"
    return by


def serving_ready(kind: Kind, job: str, count: int) -> dict[int, dict[str, Any]] | None:
    """The replica pods once there are exactly `count`, all Ready, and the job's status
    agrees (its allocation lists `count` replicas)."""
    pods = replica_pods(kind, job)
    status = get_job(kind, job).get("status") or {}
    if (sorted(pods) != list(range(count)) or any(condition(p, "Ready") != "True" for p in pods.values())
            or len((status.get("allocation") or {}).get("replicas") or []) != count):
        return None
    return pods


def check_placement(kind: Kind, job: str, pods: dict[int, dict[str, Any]], nodes: dict[int, str],
                    chips: int) -> None:
    """Each replica's pod on the Node of its allocated server, with its chips as devices, and
    no chip held twice across the jobs."""
    allocation = {r["index"]: r for r in get_job(kind, job)["status"]["allocation"]["replicas"]}
    assert sorted(allocation) == sorted(pods)
    for index, pod in pods.items():
        (server,) = allocation[index]["servers"]
        assert len(allocation[index]["chips"]) == chips
        assert pod["metadata"]["annotations"]["ultraplane.dev/server"] == server
        assert pod["spec"]["nodeName"] == nodes[int(server.rsplit("/s", 1)[1])], (server, pod["spec"])
        assert pod["spec"]["containers"][0]["resources"]["limits"][NEURON] == str(chips)
    jobs = kind.items("trainingjobs", "-n", NS)
    for ij in kind.items("inferencejobs", "-n", NS):
        chips_of = [c for r in ((ij.get("status") or {}).get("allocation") or {}).get("replicas") or []
                    for c in r["chips"]]
        jobs.append({**ij, "status": {**ij.get("status", {}), "allocation": {"chips": chips_of}}})
    held_chips(jobs)


def test_an_autoscaled_job_follows_a_stepped_load_and_preempts_training_for_it(
        serving: dict[int, str], release: Kind) -> None:
    autoscaling = {"minReplicas": 1, "maxReplicas": 2, "scaleDownDelaySeconds": DELAY,
                   "objective": {"timeToFirstTokenMs": 1000, "timePerOutputTokenMs": 100}}
    release.apply(json.dumps(inference_job("chat", replicas=1, chips=4, autoscaling=autoscaling,
                                        args=["model-server", "--model", "llama-3-8b",
                                              "--port", str(PORT)])))
    first = wait_until("chat's replica 0 serving", lambda: serving_ready(release, "chat", 1),
                       timeout=300)
    check_placement(release, "chat", first, serving, 4)
    uid0 = first[0]["metadata"]["uid"]
    # A preemptible training job on the other server.
    release.apply(json.dumps({
        "apiVersion": "ultraplane.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": "batch", "namespace": NS, "labels": {"e2e": "serving"}},
        "spec": {"chips": 4, "profile": "trn3-gen2", "priority": 1, "preemptible": True,
                 "topology": {"wholeServers": True}, "work": {"durationSeconds": 31536000}}}))
    batch = wait_until("batch running", lambda: (s := get_job(release, "batch", "trainingjob")
                                                 .get("status") or {}).get("phase") == "Running" and s,
                       timeout=180)
    batch_chips = sorted(batch["allocation"]["chips"])

    # no load yet: the model server reports none, and one replica (minReplicas) is kept
    idle = wait_until("a load read with no requests", lambda: (
        (st := get_job(release, "chat").get("status") or {}).get("load") and st), timeout=180)
    assert idle["load"]["requestsPerSecond"] == 0 and get_job(release, "chat")["spec"]["replicas"] == 1

    # x12: scaled up through the scale subresource, onto the training job's server
    load_generator(release, "chat", 12)
    wait_until("chat scaled up", lambda: get_job(release, "chat")["spec"]["replicas"] == 2,
               timeout=240, last=lambda: str(get_job(release, "chat").get("status")))
    scaled_up = time.monotonic()
    pods = wait_until("2 replicas serving", lambda: serving_ready(release, "chat", 2), timeout=300,
                      last=lambda: str(get_job(release, "chat").get("status")))
    check_placement(release, "chat", pods, serving, 4)
    assert pods[0]["metadata"]["uid"] == uid0
    assert pods[0]["status"]["containerStatuses"][0]["restartCount"] == 0
    added = get_job(release, "chat")["status"]["allocation"]["replicas"][1]
    assert sorted(added["chips"]) == batch_chips, "the added replica is not where batch was"
    preempted = get_job(release, "batch", "trainingjob")["status"]
    assert preempted["phase"] in ("Preempted", "Pending"), preempted
    assert not (preempted.get("allocation") or {}).get("chips")
    # its Preempted condition names the inference job whose scale-up took the chips (its
    # message may say since why it waits)
    (why,) = [c for c in preempted["conditions"] if c["type"] == "Preempted"]
    assert why["status"] == "True", why
    assert f"job ij/{NS}/chat, scaling up to 2 replicas" in why["message"], why
    assert preempted.get("preemptions", 0) >= 1
    chat = get_job(release, "chat")["status"]
    assert "AutoscalingOverridden" not in {c["type"] for c in chat.get("conditions", [])}

    # x1 again: down to one replica once the delay has passed; batch gets its chips back
    load_generator(release, "chat", 1)
    wait_until("chat scaled down", lambda: get_job(release, "chat")["spec"]["replicas"] == 1,
               timeout=300, last=lambda: str(get_job(release, "chat").get("status")))
    assert time.monotonic() - scaled_up >= DELAY
    pods = wait_until("1 replica serving", lambda: serving_ready(release, "chat", 1), timeout=180)
    assert pods[0]["metadata"]["uid"] == uid0
    wait_until("batch running again", lambda: get_job(release, "batch", "trainingjob")
               .get("status", {}).get("phase") == "Running", timeout=180)
    # the one replica now takes all of the x1 load, read from its model server's metrics
    steady = wait_until("the x1 load read", lambda: (
        rps := (get_job(release, "chat").get("status") or {}).get("load", {}).get("requestsPerSecond")
    ) and abs(rps - RATE) < 0.3 * RATE and rps, timeout=120,
        last=lambda: str(get_job(release, "chat")["status"].get("load")))
    assert steady == pytest.approx(RATE, rel=0.3)
    assert get_job(release, "chat")["spec"]["replicas"] == 1
    check_placement(release, "chat", pods, serving, 4)
    release.kc("delete", "pod", "load", "-n", NS, "--wait", timeout=120)
    release.kc("delete", "inferencejob", "chat", "-n", NS, "--wait", timeout=180)
    release.kc("delete", "trainingjob", "batch", "-n", NS, "--wait", timeout=180)


def test_kubectl_scale_resizes_a_job_and_kept_replicas_keep_their_pods(
        serving: dict[int, str], release: Kind) -> None:
    release.apply(json.dumps(inference_job("fixed", replicas=1, chips=2, autoscaling=None,
                                        args=["model-server", "--model", "llama-3-8b",
                                              "--port", str(PORT)])))
    first = wait_until("fixed's replica serving", lambda: serving_ready(release, "fixed", 1),
                       timeout=300)
    check_placement(release, "fixed", first, serving, 2)
    release.kc("scale", "inferencejob", "fixed", "-n", NS, "--replicas", "3")
    grown = wait_until("3 replicas serving", lambda: serving_ready(release, "fixed", 3),
                       timeout=300, last=lambda: str(get_job(release, "fixed").get("status")))
    check_placement(release, "fixed", grown, serving, 2)
    assert grown[0]["metadata"]["uid"] == first[0]["metadata"]["uid"]
    assert get_job(release, "fixed")["status"]["replicas"] == 3
    release.kc("scale", "inferencejob", "fixed", "-n", NS, "--replicas", "2")
    shrunk = wait_until("2 replicas serving", lambda: serving_ready(release, "fixed", 2),
                        timeout=300, last=lambda: str(get_job(release, "fixed").get("status")))
    check_placement(release, "fixed", shrunk, serving, 2)
    assert {i: p["metadata"]["uid"] for i, p in shrunk.items()} == \
        {i: grown[i]["metadata"]["uid"] for i in (0, 1)}
    assert all(p["status"]["containerStatuses"][0]["restartCount"] == 0 for p in shrunk.values())
    wait_until("status.replicas 2", lambda: get_job(release, "fixed")["status"].get("replicas") == 2,
               timeout=120)
    release.kc("delete", "inferencejob", "fixed", "-n", NS, "--wait", timeout=180)
