"""The operator's planner loop on simulated model servers (`operator.autoscalers`).

The replicas are the simulator's model servers (`simulator.modelpods`) on loopback addresses,
scraped over HTTP as the operator scrapes pods; the clock is a test's, so each tick's load is
exactly the trace's requests between two ticks. The API server is a fake that records the
scale and status writes and turns a scale into ready replica pods at once.
"""

from __future__ import annotations

import csv
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from ultraplane.operator.autoscalers import AutoscalerLoop, Planners
from ultraplane.operator.loadreaders import DirectScrapes, Target, scrape
from ultraplane.simulator.modelpods import ModelPods, PodEndpoint

from ultraplane.ids import job_key
from ultraplane.serving.replicas import replica_for
from ultraplane.serving.requesttraces import RateSteps, RequestTrace

RATE = 8.0  # requests/s of the trace at multiple 1
REPLICA = replica_for("llama-3-8b", chips=1)


def uniform_trace(tmp: Path, rate: float = RATE, seconds: int = 900) -> RequestTrace:
    """Evenly spaced requests of one shape (the planner's sizing, not the trace's bursts)."""
    path = tmp / "trace.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
        for i in range(int(rate * seconds)):
            s = i / rate
            w.writerow([f"2024-01-01 00:{int(s // 60):02d}:{s % 60:09.6f}", 3000, 150])
    return RequestTrace.load(path)


class FakeCluster:
    """The job's body, its ready replica pods (served by `ModelPods`), and the writes."""

    def __init__(self, pods: ModelPods, replicas: int, delay: int) -> None:
        self.served = pods
        self.body: dict[str, Any] = {
            "kind": "InferenceJob",
            "metadata": {"namespace": "ns", "name": "chat", "uid": "u-chat"},
            "spec": {"replicas": replicas, "chipsPerReplica": 1, "model": {"name": "llama-3-8b"},
                     "autoscaling": {"minReplicas": 1, "maxReplicas": 8,
                                     "scaleDownDelaySeconds": delay,
                                     "objective": {"timeToFirstTokenMs": 1000,
                                                   "timePerOutputTokenMs": 100}}},
            "status": {"phase": "Running"}}
        self.scales: list[int] = []
        self.statuses: list[dict[str, Any]] = []
        self.uids: dict[str, str] = {}
        with socket.socket() as probe:  # a port no other test holds
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        self.ready(replicas)

    def ready(self, n: int) -> None:
        names = [f"chat-g{i}-r0-a0" for i in range(n)]
        for name in names:
            self.uids.setdefault(name, f"uid-{name}")
        self.served.sync(PodEndpoint(("ns", "chat"), name, self.uids[name],
                                     self.served.address_for(self.uids[name]), self.port)
                         for name in names)

    # -- what the loop calls --
    def list_pods(self, namespace: str, label: str) -> tuple[list[dict[str, Any]], str]:
        assert (namespace, label) == ("ns", "ultraplane.dev/job-uid=u-chat")
        return [{"metadata": {"name": s.endpoint.pod},
                 "spec": {"containers": [{"ports": [{"name": "metrics",
                                                     "containerPort": s.endpoint.port}]}]},
                 "status": {"phase": "Running", "podIP": s.endpoint.ip}}
                for s in self.served.served.values()], "1"

    def scale_job(self, plural: str, namespace: str, name: str, replicas: int) -> None:
        self.scales.append(replicas)
        self.body["spec"]["replicas"] = replicas
        self.ready(replicas)

    def patch_job_status(self, plural: str, namespace: str, name: str,
                         status: dict[str, Any], version: str) -> None:
        self.statuses.append(status)


@pytest.fixture
def now() -> list[float]:
    return [1000.0]


def run(tmp_path: Path, now: list[float], steps: str, ticks: int, *, replicas: int = 1,
        delay: int = 60) -> tuple[FakeCluster, dict[Any, tuple[int, str]], list[int]]:
    pods = ModelPods(uniform_trace(tmp_path), clock=lambda: now[0],
                     replica_of_job=lambda _: REPLICA, steps=RateSteps.parse(steps))
    cluster = FakeCluster(pods, replicas, delay)
    planned: dict[Any, tuple[int, str]] = {}
    key = job_key("InferenceJob", "ns", "chat")
    loop = AutoscalerLoop(cluster, DirectScrapes(cluster), bodies=lambda: {key: cluster.body},
                          planned=lambda: planned, clock=lambda: now[0], interval=10.0,
                          window=3)
    counts = []
    try:
        for _ in range(ticks):
            loop.tick()
            counts.append(cluster.body["spec"]["replicas"])
            now[0] += 10.0
            pods.tick()
    finally:
        pods.close()
    return cluster, planned, counts


def test_a_stepped_load_scales_up_at_once_and_down_after_the_delay(tmp_path: Path,
                                                                   now: list[float]) -> None:
    cluster, planned, counts = run(tmp_path, now, "0:1,60:5,180:1", ticks=34, delay=60)
    # tick i reads the load of [10(i-1), 10i) s: the step up at 60 s is seen at tick 7
    up = next(i for i, n in enumerate(counts) if n > 1)
    assert set(counts[:up]) == {1} and up == 7, counts
    assert min(counts[up:18]) >= 3, counts  # 5x the load holds 3+ replicas while it lasts
    # the step down at 180 s: the 30 s window forgets the peak, then the 60 s delay holds
    back = next(i for i in range(up, len(counts)) if counts[i] == 1)
    assert back * 10 >= 180 + 60, counts
    assert set(counts[back:]) == {1}, counts
    load = cluster.statuses[-1]["load"]
    assert load["requestsPerSecond"] == pytest.approx(RATE, rel=0.05)
    assert load["sloAttainment"] > 0.99
    key = job_key("InferenceJob", "ns", "chat")
    assert planned[key][0] == 1 and planned[key][1].startswith(f"scaled {counts[back - 1]} → 1")


def test_a_steady_load_writes_status_but_no_scale(tmp_path: Path, now: list[float]) -> None:
    cluster, _, counts = run(tmp_path, now, "0:1", ticks=6, replicas=1)
    assert cluster.scales == [] and set(counts) == {1}
    first = cluster.statuses[0]
    assert first["desiredReplicas"] == 1
    assert first["scalingMessage"].startswith("kept 1: forecast")
    assert first["load"]["promptTokensPerRequest"] == pytest.approx(3000)
    assert first["load"]["outputTokensPerRequest"] == pytest.approx(150)


def test_a_kept_count_still_being_placed_keeps_the_cores_reason(tmp_path: Path,
                                                                now: list[float]) -> None:
    pods = ModelPods(uniform_trace(tmp_path), clock=lambda: now[0],
                     replica_of_job=lambda _: REPLICA)
    cluster = FakeCluster(pods, 1, 60)
    cluster.body["status"]["replicas"] = 0  # its one replica waits for chips
    key = job_key("InferenceJob", "ns", "chat")
    loop = AutoscalerLoop(cluster, DirectScrapes(cluster), bodies=lambda: {key: cluster.body},
                          planned=dict, clock=lambda: now[0], interval=10.0)
    try:
        loop.tick()
        now[0] += 10.0
        pods.tick()
        loop.tick()
    finally:
        pods.close()
    (written,) = cluster.statuses
    assert "scalingMessage" not in written and written["desiredReplicas"] == 1
    assert written["load"]["requestsPerSecond"] == pytest.approx(RATE, rel=0.05)


def test_planners_need_two_reads_before_a_step(tmp_path: Path, now: list[float]) -> None:
    pods = ModelPods(uniform_trace(tmp_path), clock=lambda: now[0],
                     replica_of_job=lambda _: REPLICA)
    try:
        cluster = FakeCluster(pods, 2, 60)
        targets = [Target(s.endpoint.pod, s.endpoint.ip, s.endpoint.port)
                   for s in pods.served.values()]
        planners = Planners()
        assert planners.step(cluster.body, None, scrape(targets, now[0])) is None
        now[0] += 20.0
        pods.tick()
        step = planners.step(cluster.body, None, scrape(targets, now[0]))
        assert step is not None and step.load.replicas == 2
        assert step.load.requests_per_second == pytest.approx(RATE, rel=0.05)
    finally:
        pods.close()


def test_a_job_whose_read_fails_does_not_stop_the_others(tmp_path: Path,
                                                         now: list[float]) -> None:
    pods = ModelPods(uniform_trace(tmp_path), clock=lambda: now[0],
                     replica_of_job=lambda _: REPLICA)
    cluster = FakeCluster(pods, 1, 60)
    broken = {**cluster.body, "metadata": {"namespace": "ns", "name": "gone", "uid": "u-gone"}}
    direct = DirectScrapes(cluster)

    class Reader:
        def read(self, body: dict[str, Any], t: float, seconds: float) -> Any:
            if body["metadata"]["name"] == "gone":
                raise OSError("connection refused")
            return direct.read(body, t, seconds)

    bodies = {job_key("InferenceJob", "ns", "gone"): broken,
              job_key("InferenceJob", "ns", "chat"): cluster.body}
    loop = AutoscalerLoop(cluster, Reader(), bodies=lambda: bodies, planned=dict,
                          clock=lambda: now[0], interval=10.0)
    try:
        assert loop.tick() == []  # a first read of "chat": nothing to compare yet
        now[0] += 10.0
        pods.tick()
        (step,) = loop.tick()
        assert step.load.requests_per_second == pytest.approx(RATE, rel=0.05)
        assert len(cluster.statuses) == 1
    finally:
        pods.close()


def test_pods_that_hang_cost_one_timeout_and_the_others_are_read(tmp_path: Path,
                                                                 now: list[float]) -> None:
    """Ten replicas that accept the connection and never answer, beside one that serves."""
    pods = ModelPods(uniform_trace(tmp_path), clock=lambda: now[0],
                     replica_of_job=lambda _: REPLICA)
    FakeCluster(pods, 1, 60)  # one ready replica, served
    (served,) = pods.served.values()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # connections queue in the backlog; no byte is ever sent
    hung = [Target(f"hung-{i}", "127.0.0.1", int(silent.getsockname()[1])) for i in range(10)]
    ok = Target(served.endpoint.pod, served.endpoint.ip, served.endpoint.port)
    try:
        started = time.monotonic()
        samples = scrape([*hung, ok], now[0], timeout=1.0)
        took = time.monotonic() - started
        assert set(samples) == {ok.pod}
        assert took < 5.0, f"{took:.1f} s: the hung pods were waited for one after another"
    finally:
        silent.close()
        pods.close()
