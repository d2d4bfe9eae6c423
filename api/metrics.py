"""Prometheus metrics, one registry per app (tests build many apps in one process).

Request metrics come from a plain ASGI middleware (cheap enough for the
1,000 reads/s target); fleet gauges are read from the backend at scrape time
by a collector, so they are never stale and cost nothing between scrapes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

Scope = dict[str, Any]
ASGIApp = Callable[..., Any]


class FleetCollector(Collector):
    """Exports the backend's fleet summary (chips, power, jobs by phase) on every scrape."""

    def __init__(self, summary: Callable[[], dict[str, Any]]) -> None:
        self.summary = summary

    def collect(self) -> Iterator[Metric]:
        data = self.summary()
        simple = {
            "ultraplane_fleet_chips": ("Chips in the fleet.", "chips"),
            "ultraplane_fleet_allocated_chips": ("Chips held by jobs.", "allocated_chips"),
            "ultraplane_fleet_power_watts": ("Fleet power draw (simulated).", "power_watts"),
            "ultraplane_fleet_utilization": ("Mean chip utilization, 0..1.", "utilization"),
            "ultraplane_fleet_energy_kwh": ("Energy since the fleet started.", "energy_kwh"),
        }
        for name, (doc, key) in simple.items():
            if key in data:
                yield GaugeMetricFamily(name, doc, value=float(data[key]))
        per_queue = {
            "usedChips": ("ultraplane_queue_used_chips", "Chips a tenant queue's jobs hold."),
            "borrowedChips": ("ultraplane_queue_borrowed_chips",
                              "Chips a tenant queue holds above its nominal quota."),
            "nominalChips": ("ultraplane_queue_nominal_chips", "A tenant queue's nominal chips."),
            "fairShareChips": ("ultraplane_queue_fair_share_chips",
                               "A tenant queue's fair share of its cohort's chips now."),
            "pendingJobs": ("ultraplane_queue_pending_jobs", "Jobs waiting in a tenant queue."),
            "admittedJobs": ("ultraplane_queue_admitted_jobs", "Jobs holding a queue's chips."),
        }
        for key, (name, doc) in per_queue.items():
            family = GaugeMetricFamily(name, doc, labels=["queue"])
            for queue in data.get("queues", []):
                family.add_metric([str(queue["name"])], float(queue.get(key) or 0))
            yield family
        per_budget = {
            "watts": ("ultraplane_power_budget_watts", "A power budget's limit, in watts."),
            "predictedWatts": ("ultraplane_power_budget_predicted_watts",
                               "A power budget's predicted draw, in watts."),
            "measuredWatts": ("ultraplane_power_budget_measured_watts",
                              "A power budget's measured draw, in watts."),
            "headroomWatts": ("ultraplane_power_budget_headroom_watts",
                              "Watts left under a power budget (negative: over it)."),
        }
        for key, (name, doc) in per_budget.items():
            family = GaugeMetricFamily(name, doc, labels=["budget"])
            for budget in data.get("budgets", []):
                if budget.get(key) is not None:
                    family.add_metric([str(budget["name"])], float(budget[key]))
            yield family
        capped = GaugeMetricFamily("ultraplane_power_budget_capped_jobs",
                                   "Jobs power-capped to keep a budget.", labels=["budget"])
        for budget in data.get("budgets", []):
            capped.add_metric([str(budget["name"])], float(len(budget.get("capped") or ())))
        yield capped
        if "energy_kwh" in data:  # Prometheus' unit for energy: joules, as a counter
            yield CounterMetricFamily("ultraplane_fleet_energy_joules",
                                      "Energy the fleet drew since it started, in joules.",
                                      value=float(data["energy_kwh"]) * 3.6e6)
        yield from _inference(data.get("inference", []))
        phases = GaugeMetricFamily("ultraplane_jobs", "Jobs by kind and phase.", labels=["kind", "phase"])
        for (kind, phase), count in sorted(data.get("jobs", {}).items()):
            phases.add_metric([kind, phase], float(count))
        yield phases


def _inference(services: list[dict[str, Any]]) -> Iterator[Metric]:
    """Each serving InferenceJob's replicas, offered load and p99 TTFT against its objective
    (a figure the fleet does not report is left out, not exported as zero)."""
    labels = ["namespace", "name"]
    replicas = GaugeMetricFamily("ultraplane_inferencejob_replicas",
                                 "An InferenceJob's replicas: desired, placed and ready.",
                                 labels=[*labels, "state"])
    per_job = {
        "requestsPerSecond": ("ultraplane_inferencejob_requests_per_second",
                              "An InferenceJob's observed offered load, requests/s.", 1.0),
        "ttftP99Ms": ("ultraplane_inferencejob_ttft_p99_seconds",
                      "An InferenceJob's observed p99 time to first token, seconds.", 1e-3),
        "ttftObjectiveMs": ("ultraplane_inferencejob_ttft_objective_seconds",
                            "The p99 time to first token an InferenceJob is held to, seconds.",
                            1e-3),
    }
    families = {key: GaugeMetricFamily(name, doc, labels=labels)
                for key, (name, doc, _) in per_job.items()}
    for service in services:
        job = [str(service["namespace"]), str(service["name"])]
        for state, key in (("desired", "desiredReplicas"), ("placed", "replicas"),
                           ("ready", "readyReplicas")):
            replicas.add_metric([*job, state], float(service[key]))
        for key, (_, _, scale) in per_job.items():
            if service.get(key) is not None:
                families[key].add_metric(job, float(service[key]) * scale)
    yield replicas
    yield from families.values()


class Metrics:
    """The registry and instruments of one app."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "ultraplane_http_requests", "HTTP requests by route and status.",
            ["method", "route", "status"], registry=self.registry,
        )
        self.latency = Histogram(
            "ultraplane_http_request_seconds", "HTTP request latency by route.",
            ["method", "route"], registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
        )

    def watch_fleet(self, summary: Callable[[], dict[str, Any]]) -> None:
        self.registry.register(FleetCollector(summary))


class MetricsMiddleware:
    """Counts and times requests, labelled by the route template (bounded cardinality)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = scope.get("method", "GET")
            self.metrics.requests.labels(method, template, str(status["code"])).inc()
            self.metrics.latency.labels(method, template).observe(time.perf_counter() - start)
