"""Replay a fleet's training trace beside its services under each scaling policy.

Why three replays and not one: a scaling policy changes which chips training gets, so each
policy (`services.SERVICE_POLICIES`) replays the same fleet, training trace and request
traces from the start, and the figures compare like with like. The CLI
(`ultraplane simulate --inference`) and `bench/inference.py` share this.

The figures (summary.json's `inference` and `training_useful_chip_hours`):
`inference[SERVICE][POLICY]` is the service's `ServiceFigures.summary`, and the training
figure is the chip-hours of training work done and kept (not lost to a preemption or a
fault) while the services ran, from the first start to the last end; an attempt's work is
spread evenly over it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ultraplane.simulator.records import ReplayResult
from ultraplane.simulator.replay import Replay, ReplayConfig
from ultraplane.simulator.servicefiles import ServiceSpec
from ultraplane.simulator.services import SERVICE_POLICIES, Service
from ultraplane.simulator.traces import TraceJob

__all__ = ["inference_summary", "replay_services", "say_inference", "service_window",
           "training_chip_hours"]


def service_window(start_s: float, specs: Sequence[ServiceSpec]) -> tuple[float, float]:
    """From the first service's start to the last one's end, on the replay's clock."""
    return (start_s + min(s.start_seconds for s in specs),
            start_s + max(s.start_seconds + s.duration_seconds for s in specs))


def replay_services(topology: Any, jobs: Sequence[TraceJob], specs: Sequence[ServiceSpec],
                    config: ReplayConfig, *, policies: Sequence[str] = SERVICE_POLICIES,
                    stop_at_end: bool = False,
                    held: Mapping[str, Sequence[str]] | None = None) -> list[ReplayResult]:
    """One replay per scaling policy (each result's `policy` is the scaling policy's name).
    `stop_at_end` stops each replay when the last service ends (a study of that window)."""
    start = min((j.submit_s for j in jobs), default=0.0)
    profile = next(iter(sorted(topology.profiles)))
    results = []
    for policy in policies:
        services = [Service(spec, policy, profile, start + spec.start_seconds) for spec in specs]
        cfg = config
        if stop_at_end:
            cfg = dataclasses.replace(config, until_s=service_window(start, specs)[1])
        result = Replay(topology, jobs, cfg, held=held, services=services).run()
        result.policy = policy
        results.append(result)
    return results


def training_chip_hours(result: ReplayResult, t0: float, t1: float) -> float:
    """Chip-hours of training work kept within [t0, t1] (each attempt's spread evenly)."""
    total = 0.0
    for start, end, chips, kept in result.attempts:
        if kept <= 0 or end <= t0 or start >= t1:
            continue
        span = end - start
        share = 1.0 if span <= 0 else (min(end, t1) - max(start, t0)) / span
        total += chips * kept * share
    return total / 3600.0


def inference_summary(results: Sequence[ReplayResult], t0: float, t1: float
                      ) -> dict[str, Any]:
    """summary.json's top-level `inference` and `training_useful_chip_hours` keys."""
    inference: dict[str, dict[str, Any]] = {}
    for r in results:
        for s in r.services:
            inference.setdefault(s.spec.name, {})[r.policy] = {
                **s.figures.summary(s.replica.startup_s),
                "replica_splits": r.inference_splits,
            }
    return {"inference": inference,
            "training_useful_chip_hours": {r.policy: training_chip_hours(r, t0, t1)
                                           for r in results},
            "services_window_s": [t0, t1]}


def say_inference(out: Path) -> list[str]:
    """The services' figures of a written summary.json, a line per service and policy."""
    summary = json.loads((out / "summary.json").read_text())
    chips = summary.get("training_useful_chip_hours", {})
    lines = []
    for name, by_policy in summary.get("inference", {}).items():
        for policy, f in by_policy.items():
            att, per = f.get("slo_attainment"), f.get("output_tokens_per_kwh")
            lines.append(
                f"{name} under {policy:>11}: {'n/a' if att is None else f'{att:.2%}'} of "
                f"{f['requests']:,.0f} requests within the objective, p99 TTFT "
                f"{_ms(f.get('ttft_p99_ms'))}, TPOT {_ms(f.get('tpot_p99_ms'))}, "
                f"{'n/a' if per is None else f'{per:,.0f}'} output tokens/kWh, "
                f"{f['replica_hours']:,.0f} replica-hours; training "
                f"{chips.get(policy, 0.0):,.0f} useful chip-hours")
    return lines


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f} ms"
