"""A job's plan on its chips: step time, checkpoint timeline, power, inference figures.

Why precomputed: everything about an attempt (how fast it steps on this
spread, what it draws, when it will finish) is fixed the moment it gets its
chips, so the runtime computes it once here and then answers progress and
energy queries in closed form.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ultraplane.simulator.checkpoints import checkpointed_s, computed_s, wall_s
from ultraplane.simulator.fleets import FleetShape, chips_per_ultraserver
from ultraplane.simulator.models import (
    Assumptions,
    Hardware,
    inference,
    spread_slowdown,
    training_step,
)

from ultraplane.documents.jobspecs import JobWork
from ultraplane.hardware.powermodels import chip_power_of
from ultraplane.ids import parse_chip_id

DEFAULT_INFERENCE_PARAMS_B = 8.0  # assumption: an inference spec without a model size
OUTPUT_TOKENS_PER_REQUEST = 256  # assumption: turns a requests/s load into tokens/s


def spread_level(chips: Sequence[str], hw: Hardware) -> str:
    """Tightest level holding every chip: server, rack, ultraserver, or network-1."""
    parts = [parse_chip_id(c) for c in chips]
    if len({us for us, _, _ in parts}) > 1:
        return "network-1"
    servers = {s for _, s, _ in parts}
    if len(servers) == 1:
        return "server"
    per_rack = max(hw.chips_per_rack // hw.chips_per_server, 1) if hw.chips_per_rack else 0
    if per_rack and len({s // per_rack for s in servers}) == 1:
        return "rack"
    return "ultraserver"


@dataclass(frozen=True)
class Plan:
    precision: str
    failure_policy: str
    total_steps: int
    step_s: float
    interval_s: float
    checkpoint_s: float
    restart_s: float
    duration_s: float | None  # inference run length (None: until stopped)
    utilization: float
    busy_watts: float
    extra_watts: float
    extra_watts_of: dict[str, float]
    per_us: dict[str, int]
    tokens_per_s: float | None = None
    latency_ms: float | None = None
    slo_met: bool | None = None
    tokens_per_megawatt: float | None = None

    def _restart(self, resume: int) -> float:
        return self.restart_s if resume > 0 else 0.0

    def progress(self, elapsed: float, resume: int) -> tuple[int, int]:
        """(completed, checkpointed) steps after `elapsed` simulated seconds of this attempt."""
        if not self.total_steps:
            return 0, 0
        e = elapsed - self._restart(resume)
        if e <= 0:
            return resume, resume
        compute = computed_s(e, self.interval_s, self.checkpoint_s)
        kept = checkpointed_s(e, self.interval_s, self.checkpoint_s)
        done = min(self.total_steps, resume + math.floor(compute / self.step_s + 1e-9))
        saved = min(self.total_steps, resume + math.floor(kept / self.step_s + 1e-9))
        return done, saved

    def finish_after(self, resume: int) -> float | None:
        """Seconds from attempt start to the last step (None: runs until stopped)."""
        if not self.total_steps:
            return self.duration_s
        work = (self.total_steps - resume) * self.step_s
        return self._restart(resume) + wall_s(work, self.interval_s, self.checkpoint_s)


def offered_tokens_per_s(job: JobWork) -> float | None:
    """An inference job's offered load in output tokens per second (a load in requests per
    second at `OUTPUT_TOKENS_PER_REQUEST` each)."""
    if job.load_tokens_per_s is None and job.load_requests_per_s is not None:
        return job.load_requests_per_s * OUTPUT_TOKENS_PER_REQUEST
    return job.load_tokens_per_s


def plan_job(job: JobWork, chips: Sequence[str], shape: FleetShape, a: Assumptions) -> Plan:
    per_us = chips_per_ultraserver(chips)
    hw = shape.hardware_of[next(iter(per_us))]
    level = spread_level(chips, hw)
    n = len(chips)
    extra: dict[str, float] = {}
    tokens = latency = tpmw = None
    slo = None
    if job.replicated:
        offered = offered_tokens_per_s(job)
        replicas = max(job.replicas, 1)
        r = inference(hw, params_b=job.params_b or DEFAULT_INFERENCE_PARAMS_B, precision=job.precision,
                      chips=max(n // replicas, 1), tpot_slo_ms=job.tpot_slo_ms,
                      ttft_slo_ms=job.ttft_slo_ms, a=a)
        capacity = r.tokens_per_s * replicas
        load = min(offered, capacity) if offered else capacity
        util = r.utilization * (load / capacity if capacity else 0.0)
        tokens, latency, slo = load, r.tpot_s * 1e3, r.slo_met and load >= (offered or 0)
        total, step, interval, duration = 0, 1.0, 1.0, job.duration_s
    else:
        interval, duration = job.checkpoint_interval_s, None
        if job.params_b and job.steps and job.tokens_per_step:
            st = training_step(hw, params_b=job.params_b, tokens_per_step=job.tokens_per_step,
                               precision=job.precision, chips=n, level=level, a=a)
            total, step, util = job.steps, st.seconds, st.utilization
        else:
            slow = spread_slowdown(hw, level, n, a)
            # duration work counts one "step" per ideal second; bare steps take 1 s each (assumption)
            total = job.steps or math.ceil(job.duration_s or 1.0)
            step, util = slow, a.busy_utilization / slow
    for name, k in per_us.items():
        h = shape.hardware_of[name]
        extra[name] = k * (h.chip_power(util, job.precision, a) - h.idle_watts)
    idle = sum(shape.hardware_of[name].idle_watts * k for name, k in per_us.items())
    busy = idle + sum(extra.values())
    if tokens is not None and busy:
        tpmw = tokens / (busy / 1e6)
    return Plan(job.precision, str(job.failure_policy), total, step, interval, a.checkpoint_cost_s,
                a.restart_cost_s, duration, util, busy, sum(extra.values()), extra, per_us,
                tokens, latency, slo, tpmw)


def under_cap(base: Plan, cap_w: float | None, shape: FleetShape) -> Plan:
    """`base` (the uncapped plan of an attempt) with its chips capped at `cap_w` watts each:
    each UltraServer's draw capped (`ultraplane.hardware.powermodels`, the curve the scheduler
    predicts with), the steps slowed by the slowest chip's speed share, an inference job's
    throughput too. No restart is charged: the job keeps running through a cap change."""
    if cap_w is None:
        return replace(base, restart_s=0.0)
    speed = 1.0
    extra: dict[str, float] = {}
    for name, k in base.per_us.items():
        hw = shape.hardware_of[name]
        chip = chip_power_of(hw.name)
        per_chip = hw.idle_watts + base.extra_watts_of[name] / k
        speed = min(speed, chip.speed(per_chip, cap_w))
        extra[name] = k * (chip.capped(per_chip, cap_w) - hw.idle_watts)
    idle = sum(shape.hardware_of[n].idle_watts * k for n, k in base.per_us.items())
    busy = idle + sum(extra.values())
    tokens = None if base.tokens_per_s is None else base.tokens_per_s * speed
    return replace(
        base, restart_s=0.0, step_s=base.step_s / max(speed, 1e-6),
        utilization=base.utilization * speed, busy_watts=busy, extra_watts=sum(extra.values()),
        extra_watts_of=extra, tokens_per_s=tokens,
        tokens_per_megawatt=None if tokens is None or not busy else tokens / (busy / 1e6))
