"""Reading an InferenceJob's load: its model servers' vLLM metrics, scraped or from Prometheus.

Why two readers with one output: the direct scrape works on any cluster (the operator GETs
each ready replica pod's `metrics` port, as Prometheus would); a platform team that already
runs Prometheus may point the operator at it instead (`--prometheus-url`). Both return, per
replica pod, its counters and histograms at instants (`serving.observations.ReplicaSample`),
and the core turns two such sets into the window's load, so both paths give the planner the
same figures.

The Prometheus reader asks, for each metric, for the raw samples of the window (a range
vector) of the job's pods, and takes each series' first and last sample, so the counters are
read exactly as scraped (no `rate()` extrapolation):

    vllm:request_success_total{namespace="NS",pod=~"JOB-.+"}[60s]
    vllm:time_to_first_token_seconds_bucket{namespace="NS",pod=~"JOB-.+"}[60s]

and so on for every metric in `METRICS` (the selector is `--prometheus-selector`).
"""

from __future__ import annotations

import json
import math
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from ultraplane.pods.launches import LABEL_JOB_UID, metrics_port
from ultraplane.serving.observations import Histogram, ReplicaSample

COUNTERS = {"requests": "vllm:request_success_total", "prompt_tokens": "vllm:prompt_tokens_total",
            "output_tokens": "vllm:generation_tokens_total"}
GAUGES = {"running": "vllm:num_requests_running", "waiting": "vllm:num_requests_waiting"}
HISTOGRAMS = {"ttft": "vllm:time_to_first_token_seconds",
              "tpot": "vllm:time_per_output_token_seconds",
              "prompt_lengths": "vllm:request_prompt_tokens",
              "output_lengths": "vllm:request_generation_tokens"}
METRICS = (*COUNTERS.values(), *GAUGES.values(), *(f"{h}_bucket" for h in HISTOGRAMS.values()),
           *(f"{h}_sum" for h in HISTOGRAMS.values()))
DEFAULT_SELECTOR = 'namespace="{namespace}",pod=~"{name}-.+"'
SCRAPE_WORKERS = 32  # concurrent fetches across all jobs; more would only queue on the GIL


@dataclass(frozen=True)
class Target:
    """A ready replica pod's metrics endpoint."""

    pod: str
    ip: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.ip}:{self.port}/metrics"


def _sample(t: float, values: Mapping[str, float],
            buckets: Mapping[str, list[tuple[float, float]]]) -> ReplicaSample:
    """A ReplicaSample from flat metric values (summed over the series' other labels)."""

    def hist(name: str) -> Histogram | None:
        b = buckets.get(name)
        if not b:
            return None
        merged: dict[float, float] = {}
        for le, v in b:
            merged[le] = merged.get(le, 0.0) + v
        return Histogram(tuple(sorted(merged.items())), values.get(f"{name}_sum", 0.0))

    empty = Histogram(((math.inf, 0.0),))
    return ReplicaSample(
        t=t, requests=values.get(COUNTERS["requests"], 0.0),
        prompt_tokens=values.get(COUNTERS["prompt_tokens"], 0.0),
        output_tokens=values.get(COUNTERS["output_tokens"], 0.0),
        ttft=hist(HISTOGRAMS["ttft"]) or empty, tpot=hist(HISTOGRAMS["tpot"]) or empty,
        prompt_lengths=hist(HISTOGRAMS["prompt_lengths"]),
        output_lengths=hist(HISTOGRAMS["output_lengths"]),
        running=values.get(GAUGES["running"], 0.0), waiting=values.get(GAUGES["waiting"], 0.0))


def parse_exposition(text: str, t: float) -> ReplicaSample:
    """One model server's /metrics page, read at `t`."""
    values: dict[str, float] = {}
    buckets: dict[str, list[tuple[float, float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith("_bucket"):
                buckets.setdefault(s.name[:-7], []).append((float(s.labels["le"]), s.value))
            elif not s.name.endswith(("_created", "_count")):
                values[s.name] = values.get(s.name, 0.0) + s.value
    return _sample(t, values, buckets)


def _fetch(target: Target, t: float, timeout: float) -> ReplicaSample | None:
    try:
        with urllib.request.urlopen(target.url, timeout=timeout) as r:
            return parse_exposition(r.read().decode(), t)
    except (OSError, ValueError):
        return None


# One pool for every job's scrapes: a service of a hundred replicas, or one whose pods hang,
# costs one timeout, not one per pod, and never holds up the next service's read.
_SCRAPES = ThreadPoolExecutor(max_workers=SCRAPE_WORKERS, thread_name_prefix="ultraplane-scrape")


def scrape(targets: Iterable[Target], t: float, timeout: float = 2.0) -> dict[str, ReplicaSample]:
    """Each target's metrics now, fetched at once; a target that does not answer within
    `timeout` is left out (not ready)."""
    futures = {target.pod: _SCRAPES.submit(_fetch, target, t, timeout) for target in targets}
    done, _ = wait(futures.values(), timeout=timeout + 1.0)
    return {pod: sample for pod, f in futures.items()
            if f in done and (sample := f.result()) is not None}


class PrometheusReader:
    """The window's first and last samples of each replica pod, from Prometheus' HTTP API."""

    def __init__(self, url: str, selector: str = DEFAULT_SELECTOR, timeout: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.selector = selector
        self.timeout = timeout

    def query(self, promql: str, t: float) -> list[dict[str, object]]:
        qs = urllib.parse.urlencode({"query": promql, "time": f"{t:.3f}"})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{qs}",
                                    timeout=self.timeout) as r:
            body = json.loads(r.read())
        if body.get("status") != "success":
            raise ValueError(f"Prometheus answered {body.get('error', body)!r} to {promql}")
        result = body["data"]["result"]
        return result if isinstance(result, list) else []

    def window(self, namespace: str, name: str, t: float,
               seconds: float) -> tuple[dict[str, ReplicaSample], dict[str, ReplicaSample]]:
        """Per pod, its samples at the start and at the end of the `seconds` before `t`."""
        sel = self.selector.format(namespace=namespace, name=name)
        names = "|".join(METRICS)
        promql = f'{{__name__=~"{names}",{sel}}}[{max(int(seconds), 1)}s]'
        Read = tuple[float, dict[str, float], dict[str, list[tuple[float, float]]]]
        firsts: dict[str, Read] = {}
        lasts: dict[str, Read] = {}
        for series in self.query(promql, t):
            labels = series["metric"]
            values = series["values"]
            assert isinstance(labels, dict) and isinstance(values, list)
            pod, metric = str(labels.get("pod", "")), str(labels["__name__"])
            for which, (ts, v) in ((firsts, values[0]), (lasts, values[-1])):
                t_, flat, buckets = which.setdefault(pod, (float(ts), {}, {}))
                which[pod] = (max(t_, float(ts)) if which is lasts else min(t_, float(ts)),
                              flat, buckets)
                if metric.endswith("_bucket"):
                    buckets.setdefault(metric[:-7], []).append((float(str(labels["le"])),
                                                                float(v)))
                else:
                    flat[metric] = flat.get(metric, 0.0) + float(v)
        return ({p: _sample(*x) for p, x in firsts.items()},
                {p: _sample(*x) for p, x in lasts.items()})


def targets_of(pods: Iterable[Mapping[str, Any]]) -> list[Target]:
    """The running, not deleting pods with an IP and a `metrics` port."""
    out = []
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        port, ip = metrics_port(pod), status.get("podIP")
        if (meta.get("deletionTimestamp") or status.get("phase") != "Running" or port is None
                or not ip):
            continue
        out.append(Target(str(meta["name"]), str(ip), port))
    return out


class DirectScrapes:
    """The job's replica pods (by its uid label), scraped now; the window starts at the last
    read (the planner keeps it)."""

    def __init__(self, kube: Any) -> None:
        self.kube = kube

    def read(self, body: Mapping[str, Any], now: float,
             seconds: float) -> tuple[dict[str, ReplicaSample] | None, dict[str, ReplicaSample]]:
        meta = body["metadata"]
        pods, _ = self.kube.list_pods(meta["namespace"], f"{LABEL_JOB_UID}={meta['uid']}")
        return None, scrape(targets_of(pods), now)


class PrometheusReads:
    """The window's first and last samples from a Prometheus server."""

    def __init__(self, reader: PrometheusReader) -> None:
        self.reader = reader

    def read(self, body: Mapping[str, Any], now: float,
             seconds: float) -> tuple[dict[str, ReplicaSample] | None, dict[str, ReplicaSample]]:
        meta = body["metadata"]
        return self.reader.window(meta["namespace"], meta["name"], now, seconds)
