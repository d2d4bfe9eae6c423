"""The simulated replicas' metrics endpoints: one per running replica pod of an InferenceJob.

Why addresses on 127/8: on the API server tier no kubelet gives pods an IP, and Linux routes
all of 127.0.0.0/8 to loopback, so each replica pod gets its own `127.0.0.N` (written as its
`status.podIP` when none is set) and its model server listens there on the pod's
`containerPort` named `metrics`, as vLLM's would. Whoever reads the metrics (the operator's
direct scrape, a Prometheus server) finds them exactly as on a real cluster: the pod's IP and
its named port. A pod that has no `metrics` port, or an IP outside 127/8 (a real kubelet's),
is not served.

Each `tick` offers the trace's requests since the last tick (`requesttraces`) to every
InferenceJob, split evenly over its ready replicas (sorted by pod name, round robin).
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from ultraplane.simulator.modelservers import ReplicaMetrics

from ultraplane.serving.replicas import Replica
from ultraplane.serving.requesttraces import RateSteps, RequestTrace

__all__ = ["ModelPods", "PodEndpoint"]

TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"  # the format vLLM serves

@dataclass(frozen=True)
class PodEndpoint:
    """A ready replica pod of an InferenceJob: where its model server listens."""

    job: tuple[str, str]  # (namespace, InferenceJob name)
    pod: str
    uid: str
    ip: str
    port: int


@dataclass
class _Served:
    endpoint: PodEndpoint
    metrics: ReplicaMetrics
    server: Any
    thread: Any


def _serve(ip: str, port: int, registry: CollectorRegistry) -> tuple[Any, threading.Thread]:
    """/metrics in the classic text format whatever the Accept header: a scraper asking for
    OpenMetrics would get prometheus-client's escaped names (`vllm_...`), where vLLM's
    servers answer `vllm:...`."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = generate_latest(registry)
            self.send_response(200)
            self.send_header("Content-Type", TEXT_FORMAT)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a scrape a second per replica is no news

    server = ThreadingHTTPServer((ip, port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True,
                              name=f"model-server-{ip}:{port}")
    thread.start()
    return server, thread


class ModelPods:
    """Serves the metrics of the replica pods it is told about, and advances their load."""

    def __init__(self, trace: RequestTrace, *, clock: Callable[[], float],
                 replica_of_job: Callable[[tuple[str, str]], Replica | None],
                 steps: RateSteps | None = None) -> None:
        self.trace = trace
        self.steps = steps or RateSteps()
        self.clock = clock
        self.replica_of_job = replica_of_job
        self.served: dict[str, _Served] = {}  # by pod uid
        self.start = clock()
        self.last = self.start
        self._next_ip = 2

    def address_for(self, uid: str) -> str:
        """A loopback address no other served pod has (127.0.1.2 on)."""
        if uid in self.served:
            return self.served[uid].endpoint.ip
        n = self._next_ip
        self._next_ip += 1
        return str(ipaddress.IPv4Address("127.0.1.0") + n)

    def sync(self, endpoints: Iterable[PodEndpoint]) -> None:
        """Serve exactly these endpoints: start the new ones, stop the gone ones."""
        wanted = {e.uid: e for e in endpoints}
        for uid in [u for u in self.served if u not in wanted]:
            self._stop(uid)
        for uid, e in wanted.items():
            if uid in self.served:
                continue
            replica = self.replica_of_job(e.job)
            if replica is None:
                continue
            metrics = ReplicaMetrics(replica, replica.model.name)
            server, thread = _serve(e.ip, e.port, metrics.registry)
            self.served[uid] = _Served(e, metrics, server, thread)

    def tick(self) -> int:
        """Offer the requests since the last tick; returns how many were offered."""
        now = self.clock()
        t0, t1 = self.last - self.start, now - self.start
        self.last = now
        prompts, outputs = self.trace.between(t0, t1, self.steps.at(t0))
        by_job: dict[tuple[str, str], list[_Served]] = {}
        for s in self.served.values():
            by_job.setdefault(s.endpoint.job, []).append(s)
        for replicas in by_job.values():
            replicas.sort(key=lambda s: s.endpoint.pod)
            k = len(replicas)
            for i, s in enumerate(replicas):
                s.metrics.serve(t1 - t0, prompts[i::k], outputs[i::k])
        return int(prompts.size)

    def close(self) -> None:
        for uid in list(self.served):
            self._stop(uid)

    def _stop(self, uid: str) -> None:
        s = self.served.pop(uid)
        s.server.shutdown()
        s.server.server_close()
