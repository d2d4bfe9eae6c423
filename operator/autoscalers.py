"""The planner in the operator: each autoscaled InferenceJob sized from its model servers' load.

Why a timer loop beside the admission loop: load is not an event of the API server; it is
read from the replicas' metrics (`loadreaders`) every `interval` seconds. Each tick, for
every admitted InferenceJob with spec.autoscaling, the loop reads its replicas' samples, the
core turns the last two reads into the interval's load (`serving.observations.observe`) and
the core's planner (`serving.planners.plan`) sizes the job on the last `window` intervals.
A new count is written where `kubectl scale` writes it, the scale subresource, so the one
rescale path (`observations.ObservationCache.follow_replicas`) does the rest; the count is
noted in `planned` first, so that path does not take the planner's own edit for an
override. status.load, status.desiredReplicas and status.scalingMessage say what the loop
saw and decided.

`Planners` holds the per-job state and makes the decisions without I/O, so a test drives it
with samples and a clock; `AutoscalerLoop` reads and writes.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from ultraplane.ids import JobKey, job_key
from ultraplane.serving.mixes import Observation
from ultraplane.serving.observations import Load, ReplicaSample, observe
from ultraplane.serving.planners import Autoscaling, Decision, Objective, plan
from ultraplane.serving.replicas import replica_for

log = logging.getLogger("ultraplane.operator")

Samples = dict[str, ReplicaSample]


class LoadReader(Protocol):
    """Where samples come from: (samples at the window's start or None, samples now)."""

    def read(self, body: Mapping[str, Any], now: float,
             seconds: float) -> tuple[Samples | None, Samples]: ...


def autoscaling_of(spec: Mapping[str, Any]) -> Autoscaling | None:
    a = spec.get("autoscaling")
    if not isinstance(a, Mapping):
        return None
    objective = a.get("objective") or {}
    return Autoscaling(min_replicas=int(a.get("minReplicas", 1)),
                       max_replicas=int(a["maxReplicas"]),
                       objective=Objective(float(objective["timeToFirstTokenMs"]),
                                           float(objective["timePerOutputTokenMs"])),
                       scale_down_delay_s=float(a.get("scaleDownDelaySeconds", 300)))


@dataclass(frozen=True)
class Step:
    """One tick's outcome for one job."""

    current: int
    replicas: int
    load: Load
    decision: Decision
    last_change: str = ""  # when and how the count last changed, while it is kept

    @property
    def message(self) -> str:
        """scalingMessage: what changed, the load, then the planner's reason."""
        head = (f"scaled {self.current} → {self.replicas}" if self.replicas != self.current
                else f"kept {self.current}")
        if self.last_change and self.replicas == self.current:
            head += f" ({self.last_change})"
        return (f"{head}: forecast {self.decision.forecast_rate:,.0f} req/s (observed "
                f"{self.load.requests_per_second:,.1f} req/s); {self.decision.reason}")

    def status(self) -> dict[str, Any]:
        return {"load": self.load.status(), "desiredReplicas": self.replicas,
                "scalingMessage": self.message}


@dataclass
class _Service:
    samples: Samples | None = None
    window: deque[Observation] = field(default_factory=deque)
    history: tuple[tuple[float, int], ...] = ()
    last_change: str = ""


class Planners:
    """Per autoscaled job: its last samples, its window of intervals and planner history."""

    def __init__(self, window: int = 10) -> None:
        self.window = window
        self.services: dict[JobKey, _Service] = {}

    def step(self, body: Mapping[str, Any], before: Samples | None,
             now: Samples) -> Step | None:
        """Feed one read; a Step once there are two reads to compare (None before)."""
        meta, spec = body["metadata"], body.get("spec") or {}
        key = job_key("InferenceJob", meta["namespace"], meta["name"])
        autoscaling = autoscaling_of(spec)
        if autoscaling is None:
            self.services.pop(key, None)
            return None
        service = self.services.setdefault(key, _Service())
        start = before if before is not None else service.samples
        service.samples = now
        load = observe(start, now, autoscaling.objective) if start is not None else None
        if load is None or load.seconds <= 0:
            return None
        service.window.append(load.observation())
        while len(service.window) > self.window:
            service.window.popleft()
        model = spec.get("model") or {}
        replica = replica_for(str(model.get("name", "")), chips=int(spec["chipsPerReplica"]),
                              profile=spec.get("profile"),
                              parameters_b=model.get("parametersBillions"))
        current = int(spec.get("replicas", 1))
        decision = plan(replica, list(service.window), autoscaling, current=current,
                        history=service.history)
        service.history = decision.history
        step = Step(current, decision.replicas, load, decision, service.last_change)
        if step.replicas != current:
            at = datetime.fromtimestamp(load.start_s + load.seconds, UTC).strftime("%H:%M:%SZ")
            service.last_change = f"scaled {current} → {step.replicas} at {at}"
        return step

    def forget(self, key: JobKey) -> None:
        self.services.pop(key, None)


class AutoscalerLoop:
    """Every `interval` s: read, plan, and write each autoscaled running InferenceJob."""

    def __init__(self, kube: Any, reader: LoadReader, *,
                 bodies: Callable[[], Mapping[JobKey, Mapping[str, Any]]],
                 planned: Callable[[], dict[JobKey, tuple[int, str]]],
                 clock: Callable[[], float], interval: float = 30.0, window: int = 10,
                 active: Callable[[], bool] = lambda: True) -> None:
        self.kube = kube
        self.reader = reader
        self.bodies = bodies
        self.planned = planned
        self.clock = clock
        self.interval = interval
        self.active = active  # the leader only: a standby reads nothing and writes nothing
        self.planners = Planners(window)

    async def run(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.tick)
            except Exception:  # the next tick retries; a failing read must not stop the loop
                log.exception("autoscaler tick failed")
            await asyncio.sleep(self.interval)

    def tick(self) -> list[Step]:
        steps: list[Step] = []
        if not self.active():
            return steps
        now = self.clock()
        for key, body in list(self.bodies().items()):
            spec, status = body.get("spec") or {}, body.get("status") or {}
            if (body.get("kind") not in (None, "InferenceJob") or not spec.get("autoscaling")
                    or status.get("phase") != "Running"):
                self.planners.forget(key)
                continue
            try:
                before, samples = self.reader.read(body, now, self.interval)
                step = self.planners.step(body, before, samples)
                if step is not None:
                    self.write(key, body, step)
            except Exception as exc:  # one job's bad model or unreachable reader: the others go on
                log.warning("%s: no autoscaling this tick: %s", key, exc)
                continue
            if step is not None:
                steps.append(step)
        return steps

    def write(self, key: JobKey, body: Mapping[str, Any], step: Step) -> None:
        meta = body["metadata"]
        if step.replicas != step.current:
            self.planned()[key] = (step.replicas, step.message)  # before the edit: not an override
            self.kube.scale_job("inferencejobs", meta["namespace"], meta["name"], step.replicas)
            log.info("%s/%s %s", meta["namespace"], meta["name"], step.message)
        status = step.status()
        placed = (body.get("status") or {}).get("replicas")
        if step.replicas == step.current and isinstance(placed, int) and placed < step.current:
            # replicas still wait to be placed: the core's message says why; keep it
            del status["scalingMessage"]
        self.kube.patch_job_status("inferencejobs", meta["namespace"], meta["name"], status, "")
