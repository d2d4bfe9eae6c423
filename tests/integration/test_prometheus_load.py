"""The operator's two ways to read a service's load agree: scraping the simulated model
servers directly, and asking a real Prometheus server that scrapes the same replicas.

Three replicas of the simulator's model servers serve a steady trace on loopback addresses,
advanced by the wall clock; Prometheus scrapes them every second. Over the same window the
load from the direct scrapes at its two ends and from Prometheus' first and last samples
(`operator.loadreaders.PrometheusReader`) are within 5%, and the core's planner sizes the
service alike from either.
"""

from __future__ import annotations

import csv
import socket
import threading
import time
from pathlib import Path

import pytest
from ultraplane.operator.loadreaders import PrometheusReader, Target, scrape
from ultraplane.simulator.modelpods import ModelPods, PodEndpoint

from tests.integration.pod_kubelets import wait_for
from tests.integration.prometheuses import prometheus_server
from ultraplane.serving.observations import observe
from ultraplane.serving.planners import Autoscaling, Objective, plan
from ultraplane.serving.replicas import replica_for
from ultraplane.serving.requesttraces import RequestTrace

RATE = 30.0
OBJECTIVE = Objective(ttft_ms=500, tpot_ms=50)
REPLICA = replica_for("llama-3-8b", chips=1)


def steady_trace(tmp: Path) -> RequestTrace:
    path = tmp / "trace.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
        for i in range(int(RATE * 600)):
            s = i / RATE
            # two shapes alternating: the token histograms have a spread to read
            w.writerow([f"2024-01-01 00:{int(s // 60):02d}:{s % 60:09.6f}",
                        800 if i % 2 else 2400, 60 if i % 3 else 240])
    return RequestTrace.load(path)


def test_prometheus_and_the_direct_scrape_give_the_same_load(tmp_path: Path) -> None:
    pods = ModelPods(steady_trace(tmp_path), clock=time.time, replica_of_job=lambda _: REPLICA)
    stop = threading.Event()

    def advance() -> None:
        while not stop.wait(0.1):
            pods.tick()

    ticker = threading.Thread(target=advance, daemon=True)
    try:
        names = [f"chat-g{i}-r0-a0" for i in range(3)]
        with socket.socket() as probe:  # a port no other test holds
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        pods.sync(PodEndpoint(("ns", "chat"), n, n, pods.address_for(n), port)
                  for n in names)
        targets = [Target(s.endpoint.pod, s.endpoint.ip, s.endpoint.port)
                   for s in pods.served.values()]
        ticker.start()
        with prometheus_server() as prom:
            prom.scrape((f"{t.ip}:{t.port}", {"namespace": "ns", "pod": t.pod})
                        for t in targets)
            wait_for("Prometheus scraping all three replicas", lambda: prom.up() == 3, 60)
            reader = PrometheusReader(prom.url)
            t0 = time.time()
            before = scrape(targets, t0)
            wait_for("a 15 s window", lambda: time.time() >= t0 + 15, 30)
            t1 = time.time()
            after = scrape(targets, t1)

            def stored() -> bool:  # a scrape of every replica after t1 is in the TSDB
                result = reader.query("min(timestamp(vllm:request_success_total))", t1 + 3)
                return bool(result) and float(result[0]["value"][1]) >= t1  # type: ignore[index]

            wait_for("Prometheus to store a scrape past the window", stored, 30)
            first, last = reader.window("ns", "chat", t1 + 3, t1 + 3 - t0)
    finally:
        stop.set()
        if ticker.is_alive():
            ticker.join(5)
        pods.close()

    direct = observe(before, after, OBJECTIVE)
    via_prometheus = observe(first, last, OBJECTIVE)
    assert direct is not None and via_prometheus is not None
    assert direct.replicas == via_prometheus.replicas == 3
    assert direct.requests_per_second == pytest.approx(RATE, rel=0.05)
    for field in ("requests_per_second", "prompt_tokens_per_request",
                  "output_tokens_per_request", "ttft_p99_ms", "tpot_p99_ms", "slo_attainment"):
        a, b = getattr(direct, field), getattr(via_prometheus, field)
        assert a is not None and b is not None, field
        assert b == pytest.approx(a, rel=0.05), (field, a, b)
    auto = Autoscaling(1, 10, OBJECTIVE, 60)
    sized = [plan(REPLICA, [load.observation()], auto, current=3).replicas
             for load in (direct, via_prometheus)]
    assert sized[0] == sized[1], sized
