"""An autoscaled InferenceJob on a real API server, sized by the operator's planner from its
simulated model servers' vLLM metrics: a stepped load scales it up at once and back down
after the scale-down delay, and replica 0's pod keeps its UID throughout.

No kubelet runs in this tier: `PlayedKubelet` finishes pod deletions, this test sets new pods
Running, and the simulator's model servers (`simulator.modelpods`, the same pass `ultraplane
simulator --inference-trace` runs) give each running replica pod a loopback podIP and serve
its metrics on the pod's `metrics` port, where the operator scrapes them. The load is a steady
trace whose rate multiple the test steps (x1, then x12, then x1)."""

from __future__ import annotations

import contextlib
import csv
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ultraplane.simulator.cluster import serve_models
from ultraplane.simulator.modelpods import ModelPods
from ultraplane.simulator.podservings import replica_reader

from tests.integration.operator_harness import GROUP, VERSION, Harness
from tests.integration.pod_kubelets import PlayedKubelet, delete_nodes, make_nodes
from ultraplane.serving.requesttraces import RateSteps, RequestTrace

RATE = 10.0  # requests/s of the trace: one replica of llama-3-8b on 4 chips holds it
DELAY = 10  # scaleDownDelaySeconds


def steady_trace(tmp: Path) -> RequestTrace:
    path = tmp / "trace.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
        for i in range(int(RATE * 600)):
            s = i / RATE
            w.writerow([f"2024-01-01 00:{int(s // 60):02d}:{s % 60:09.6f}", 3000, 150])
    return RequestTrace.load(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def kubelet(op: Harness) -> Iterator[PlayedKubelet]:
    from kubernetes import client

    core = client.CoreV1Api(op.env.api_client())
    with PlayedKubelet(core, op.ns, interval=0.1) as k:
        yield k
    delete_nodes(core, f"{op.ns}-a")


@contextlib.contextmanager
def model_servers(op: Harness, kubelet: PlayedKubelet, trace: RequestTrace) -> Iterator[ModelPods]:
    """Every 0.3 s: new pods set Running, the running ones served and their load advanced."""
    pods = ModelPods(trace, clock=time.time, replica_of_job=replica_reader(op.api))
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(0.3):
            with contextlib.suppress(Exception):  # the next pass retries
                for name, pod in kubelet.pods().items():
                    if pod.metadata.deletion_timestamp is None and pod.status.phase == "Pending":
                        kubelet.set_phase(name, "Running")
                serve_models(kubelet.core, pods, op.ns)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield pods
    finally:
        stop.set()
        thread.join(10)
        pods.close()


def job(op: Harness) -> dict[str, Any]:
    body: dict[str, Any] = op.api.get_namespaced_custom_object(GROUP, VERSION, op.ns,
                                                               "inferencejobs", "chat")
    return body


def replica0_uid(kubelet: PlayedKubelet) -> str | None:
    for pod in kubelet.pods("").values():
        labels = pod.metadata.labels or {}
        if labels.get("ultraplane.dev/group") == "0" and pod.metadata.deletion_timestamp is None:
            return str(pod.metadata.uid)
    return None


def test_a_stepped_load_scales_an_autoscaled_job_up_then_down_after_the_delay(
    op: Harness, kubelet: PlayedKubelet, tmp_path: Path
) -> None:
    make_nodes(kubelet.core, f"{op.ns}-a", range(36))
    op.ultraserver(f"{op.ns}-a")
    op.start("--autoscale-seconds", "2")
    port = free_port()
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceJob",
            "metadata": {"name": "chat", "namespace": op.ns},
            "spec": {"replicas": 1, "chipsPerReplica": 4, "topology": {"wholeServers": True},
                     "profile": "trn3-gen2", "model": {"name": "llama-3-8b"},
                     "load": {"requestsPerSecond": RATE},
                     "autoscaling": {"minReplicas": 1, "maxReplicas": 4,
                                     "scaleDownDelaySeconds": DELAY,
                                     "objective": {"timeToFirstTokenMs": 1000,
                                                   "timePerOutputTokenMs": 100}},
                     "template": {"spec": {"containers": [{
                         "name": "vllm", "image": "vllm-neuron:test",
                         "ports": [{"name": "metrics", "containerPort": port}]}]}}}}
    op.api.create_namespaced_custom_object(GROUP, VERSION, op.ns, "inferencejobs", body)
    with model_servers(op, kubelet, steady_trace(tmp_path)) as served:
        # x1: the planner reads the load, writes it, and keeps one replica
        steady = op.wait("a load read at x1", lambda: (job(op).get("status") or {}).get(
            "load", {}).get("requestsPerSecond"), timeout=60)
        assert steady == pytest.approx(RATE, rel=0.25)
        first = replica0_uid(kubelet)
        assert first is not None and job(op)["spec"]["replicas"] == 1
        # x12: scaled up at once, through the scale subresource, no override flagged
        served.steps = RateSteps(((0.0, 12.0),))
        up = op.wait("a scale-up", lambda: job(op)["spec"]["replicas"] > 1 and job(op),
                     timeout=60)
        scaled_up = time.monotonic()
        # the planner's "scaled 1 → N: ..." (or "kept N (scaled 1 → N ...)"), or the core's
        # "Scaling up ..."/"Scaled up ..." written in between
        status = op.wait("the scale-up in the status", lambda: (
            (s := job(op)["status"]).get("scalingMessage", "").startswith("Scal")
            or "scaled 1 → " in s.get("scalingMessage", "")) and s, timeout=30)
        assert up["spec"]["replicas"] > 1
        assert "AutoscalingOverridden" not in {c["type"] for c in status.get("conditions", [])}
        peak = op.wait("the added replicas running", lambda: (
            (s := job(op)).get("status", {}).get("readyReplicas", 0) == s["spec"]["replicas"] > 1
            and s["spec"]["replicas"]), timeout=60)
        assert replica0_uid(kubelet) == first
        # x1 again: down only once the window forgot the peak and the delay held (counted
        # from the last interval that wanted the peak, at or after the scale-up)
        served.steps = RateSteps(((0.0, 1.0),))
        op.wait("the scale-down", lambda: job(op)["spec"]["replicas"] < peak, timeout=90)
        assert time.monotonic() - scaled_up >= DELAY
        op.wait("one replica again", lambda: job(op)["spec"]["replicas"] == 1, timeout=90)
        assert replica0_uid(kubelet) == first
        final = job(op)["status"]
        assert "AutoscalingOverridden" not in {c["type"] for c in final.get("conditions", [])}
        assert final["load"]["requestsPerSecond"] == pytest.approx(RATE, rel=0.25)
