"""Simulated model servers: each running replica's vLLM metrics, from a request trace.

Why simulated this way: the operator reads a service's load from its model servers' own
Prometheus metrics, as it would from vLLM on a real cluster, so the simulator must export the
same names on each replica pod's `metrics` port. The requests of each tick (`requesttraces`)
are split evenly over the job's ready replicas (round robin, as a Service spreads them); each
replica's latencies come from the core's fluid model of one replica (`serving.estimates`) at
that tick's rate and token mix, and fill the histograms' buckets in expected proportions. So
the metrics are what the planner's own model predicts for the load: a test of the loop, not
of the model.

Exported per replica (vLLM's names and bucket bounds): `vllm:request_success_total`,
`vllm:prompt_tokens_total`, `vllm:generation_tokens_total`, `vllm:num_requests_running`,
`vllm:num_requests_waiting`, and the histograms `vllm:time_to_first_token_seconds`,
`vllm:time_per_output_token_seconds` (one observation per request of 2+ tokens: its mean
gap), `vllm:request_prompt_tokens` and `vllm:request_generation_tokens`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from ultraplane.serving.estimates import estimate
from ultraplane.serving.mixes import TokenMix
from ultraplane.serving.replicas import Replica

__all__ = ["TOKEN_BUCKETS", "TPOT_BUCKETS", "TTFT_BUCKETS", "ReplicaMetrics"]

# vLLM's bucket bounds (vllm/engine/metrics.py), seconds and tokens.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0)
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000,
                 100000)


@dataclass
class _Buckets:
    bounds: tuple[float, ...]
    counts: list[float] = field(default_factory=list)  # per bucket (not cumulative), +Inf last
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0.0] * (len(self.bounds) + 1)

    def add_cumulative(self, cumulative: list[int], n: int, total: float) -> None:
        below = 0
        for i, c in enumerate([*cumulative, n]):
            self.counts[i] += c - below
            below = c
        self.total += total

    def add_values(self, values: np.ndarray[Any, Any]) -> None:
        idx = np.searchsorted(np.asarray(self.bounds, dtype=np.float64), values, side="left")
        for i, c in enumerate(np.bincount(idx, minlength=len(self.counts))):
            self.counts[i] += float(c)
        self.total += float(values.sum())

    def family(self, name: str, doc: str) -> HistogramMetricFamily:
        cum, out = 0.0, []
        for bound, c in zip([*map(str, self.bounds), "+Inf"], self.counts, strict=True):
            cum += c
            out.append((bound, cum))
        return HistogramMetricFamily(name, doc, buckets=out, sum_value=self.total)


class ReplicaMetrics(Collector):
    """One replica's counters, gauges and histograms, advanced by `serve` once a tick."""

    def __init__(self, replica: Replica, model_name: str) -> None:
        self.replica = replica
        self.model_name = model_name
        self.lock = threading.Lock()
        self.requests = self.prompt_tokens = self.output_tokens = 0.0
        self.running = self.waiting = 0.0
        self.backlog_s = 0.0  # prefill work queued at the end of the last tick
        self.ttft = _Buckets(TTFT_BUCKETS)
        self.tpot = _Buckets(TPOT_BUCKETS)
        self.prompt_lengths = _Buckets(tuple(map(float, TOKEN_BUCKETS)))
        self.output_lengths = _Buckets(tuple(map(float, TOKEN_BUCKETS)))
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def serve(self, seconds: float, prompts: np.ndarray[Any, Any],
              outputs: np.ndarray[Any, Any]) -> None:
        """Account the requests that arrived at this replica over a tick of `seconds`."""
        n = int(prompts.size)
        if n == 0 or seconds <= 0:
            self.backlog_s = max(self.backlog_s - max(seconds, 0.0), 0.0)
            with self.lock:
                self.running = self.waiting = 0.0
            return
        # One finite interval, its backlog carried from the last: a burst queues, then drains.
        e = estimate(self.replica, TokenMix.from_samples(prompts, outputs),
                     [(seconds, n / seconds)], backlog_s=self.backlog_s)
        self.backlog_s = e.final_backlog_s
        ttft = [round(n * (1.0 - e.ttft_exceedance(b))) for b in TTFT_BUCKETS]
        decoding = int((outputs >= 2).sum())
        tpot = [round(decoding * (1.0 - e.tpot_exceedance(b))) for b in TPOT_BUCKETS]
        mean_ttft = e.ttft_quantile(0.5)
        mean_tpot = e.tpot_quantile(0.5)
        with self.lock:
            self.requests += n
            self.prompt_tokens += float(prompts.sum())
            self.output_tokens += float(outputs.sum())
            self.ttft.add_cumulative(ttft, n, n * mean_ttft)
            self.tpot.add_cumulative(tpot, decoding, decoding * mean_tpot)
            self.prompt_lengths.add_values(prompts.astype(np.float64))
            self.output_lengths.add_values(outputs.astype(np.float64))
            self.running = min(e.decode_batch, e.max_batch)
            self.waiting = n / seconds * e.queueing_quantile(0.5)

    def collect(self) -> Iterator[Any]:
        labels = {"model_name": self.model_name}
        with self.lock:
            for name, doc, value in (
                    ("vllm:request_success", "Finished requests.", self.requests),
                    ("vllm:prompt_tokens", "Prefill tokens processed.", self.prompt_tokens),
                    ("vllm:generation_tokens", "Generation tokens processed.",
                     self.output_tokens)):
                c = CounterMetricFamily(name, doc, labels=list(labels))
                c.add_metric(list(labels.values()), value)
                yield c
            for name, doc, value in (
                    ("vllm:num_requests_running", "Requests on the engine.", self.running),
                    ("vllm:num_requests_waiting", "Requests waiting.", self.waiting)):
                g = GaugeMetricFamily(name, doc, labels=list(labels))
                g.add_metric(list(labels.values()), value)
                yield g
            for name, doc, b in (
                    ("vllm:time_to_first_token_seconds", "Time to first token.", self.ttft),
                    ("vllm:time_per_output_token_seconds", "Time per output token.",
                     self.tpot),
                    ("vllm:request_prompt_tokens", "Prompt tokens per request.",
                     self.prompt_lengths),
                    ("vllm:request_generation_tokens", "Generation tokens per request.",
                     self.output_lengths)):
                yield b.family(name, doc)
