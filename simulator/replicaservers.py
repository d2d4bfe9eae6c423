"""A simulated model server as a process of its own: the container of an InferenceJob replica.

Why a process: on a cluster whose pods run real containers (kind, or a real cluster without
Trainium), the operator reads an autoscaled job's load by scraping each replica pod's
`metrics` port, so something in the pod must export vLLM's metrics of the load that replica
serves. `ultraplane model-server` is that something. It takes requests the way a model server
does, from clients (`loadgenerators`), never from the job's spec: each POST to `/requests`
carries requests (their prompt and output token counts), and once a tick the server accounts
the requests that arrived during it with the same per-replica model the simulator's pods use
(`modelservers.ReplicaMetrics`: the core's fluid model of one replica at that tick's rate and
token mix). `/metrics` serves the result on the same port, as vLLM serves its metrics on its
API port; `/health` answers 200, as vLLM's does, for a readiness probe.

A batch of requests per POST, not one POST per request: the client offers a tick's requests at
once, so a 2-core test machine can offer hundreds of requests a second without the HTTP
overhead being the load.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
from prometheus_client import generate_latest
from ultraplane.simulator.modelpods import TEXT_FORMAT
from ultraplane.simulator.modelservers import ReplicaMetrics

from ultraplane.serving.replicas import Replica

__all__ = ["ReplicaServer", "RequestBatches", "parse_batch"]

MAX_BATCH = 100_000  # requests in one POST: far above any tick of a test's load


def parse_batch(raw: bytes) -> tuple[list[int], list[int]]:
    """`{"promptTokens": [...], "outputTokens": [...]}` -> the two lists; ValueError with a
    sentence on anything else."""
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        raise ValueError("the body is not JSON") from None
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object with promptTokens and outputTokens")
    prompts, outputs = body.get("promptTokens"), body.get("outputTokens")
    if not isinstance(prompts, list) or not isinstance(outputs, list) or len(prompts) != len(outputs):
        raise ValueError("promptTokens and outputTokens must be lists of the same length")
    if len(prompts) > MAX_BATCH:
        raise ValueError(f"at most {MAX_BATCH} requests in one batch")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1
               for v in (*prompts, *outputs)):
        raise ValueError("token counts must be integers of at least 1")
    return prompts, outputs


class RequestBatches:
    """The requests that arrived since the last tick, and the tick that accounts them."""

    def __init__(self, metrics: ReplicaMetrics, clock: Callable[[], float]) -> None:
        self.metrics = metrics
        self.clock = clock
        self.lock = threading.Lock()
        self.prompts: list[int] = []
        self.outputs: list[int] = []
        self.last = clock()

    def arrive(self, prompts: list[int], outputs: list[int]) -> None:
        with self.lock:
            self.prompts.extend(prompts)
            self.outputs.extend(outputs)

    def tick(self) -> int:
        """Account what arrived since the last tick over the time since; returns how many."""
        now = self.clock()
        with self.lock:
            prompts, outputs = self.prompts, self.outputs
            self.prompts, self.outputs = [], []
            seconds, self.last = now - self.last, now
        self.metrics.serve(seconds, np.asarray(prompts, dtype=np.int64),
                           np.asarray(outputs, dtype=np.int64))
        return len(prompts)


class ReplicaServer:
    """`/requests` (POST), `/metrics` and `/health` (GET) on one port; a ticker thread."""

    def __init__(self, replica: Replica, *, host: str, port: int, tick_s: float = 1.0,
                 clock: Callable[[], float]) -> None:
        self.metrics = ReplicaMetrics(replica, replica.model.name)
        self.batches = RequestBatches(self.metrics, clock)
        self.tick_s = tick_s
        self.stopped = threading.Event()
        self.http = ThreadingHTTPServer((host, port), self._handler())
        self.http.daemon_threads = True

    @property
    def port(self) -> int:
        return int(self.http.server_address[1])

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        registry, batches = self.metrics.registry, self.batches

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, code: int, body: bytes, kind: str = "text/plain") -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path == "/metrics":
                    self._answer(200, generate_latest(registry), TEXT_FORMAT)
                elif self.path == "/health":
                    self._answer(200, b"ok\n")
                else:
                    self._answer(404, b"GET /metrics or /health\n")

            def do_POST(self) -> None:
                if self.path != "/requests":
                    self._answer(404, b"POST /requests\n")
                    return
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    prompts, outputs = parse_batch(self.rfile.read(length))
                except ValueError as exc:
                    self._answer(400, f"{exc}\n".encode())
                    return
                batches.arrive(prompts, outputs)
                self._answer(200, json.dumps({"accepted": len(prompts)}).encode(),
                             "application/json")

            def log_message(self, format: str, *args: Any) -> None:
                pass  # a batch a second from each client is no news

        return Handler

    def serve(self) -> None:
        """Serve until `stop`: HTTP on a thread, the ticks on this one."""
        thread = threading.Thread(target=self.http.serve_forever, daemon=True,
                                  name="model-server-http")
        thread.start()
        try:
            while not self.stopped.wait(self.tick_s):
                self.batches.tick()
        finally:
            self.http.shutdown()
            self.http.server_close()

    def stop(self) -> None:
        self.stopped.set()
