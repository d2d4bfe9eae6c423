"""The planner in the embedded fleet: each autoscaled InferenceJob sized from simulated load.

Why here and like this: `ultraplane serve` has no model servers to scrape, so the load each
autoscaled job serves is offered by a request trace given to serve (`--inference-trace`,
else a built-in day shape; never the job's spec), replayed from the job's creation and
looping. Every `every_s` simulated seconds the trace's requests since the last step are split
evenly over the job's placed replicas, and the core's fluid model of one replica
(`serving.estimates`, as the simulator's model servers use it) gives the window's p99s and
the share within the objective; the backlog a burst leaves is carried to the next window.
The core's planner (`serving.planners.plan`) then sizes the job on its last `window` steps,
exactly as the operator's loop does, and a new count goes through the backend's one rescale
path (`scale_job`, the REST scale endpoint's: saved before it is reported). status.load,
status.desiredReplicas and status.scalingMessage say what was offered and decided, so the
history and the dashboard's chart show the load. A job without spec.autoscaling is never
touched: it keeps following spec.replicas.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ultraplane.resources import InferenceJobSpec
from ultraplane.serving.estimates import estimate
from ultraplane.serving.mixes import Observation, TokenMix
from ultraplane.serving.observations import Load
from ultraplane.serving.planners import Autoscaling, Decision, Objective, plan
from ultraplane.serving.replicas import Replica, replica_for
from ultraplane.serving.requesttraces import RequestTrace

__all__ = ["Autoscaler", "day_shape"]

log = logging.getLogger("ultraplane.api.embedded")

DAY_S = 86_400.0
# A chat service's day: a night trough at a quarter of the peak, a morning rise, an
# afternoon peak; and a handful of request shapes, from short questions to long documents.
DAY_RATES = (1, 1, 1, 1, 1, 1.5, 2.5, 3.5, 4, 4, 3.5, 3.5, 4, 4, 4, 3.5, 3, 2.5, 2, 2, 1.5,
             1.5, 1, 1)
SHAPES = ((256, 128), (512, 256), (1024, 256), (2048, 128), (4096, 512), (768, 64))


def day_shape(peak_rps: float = 4.0) -> RequestTrace:
    """The built-in trace: one day of evenly spaced arrivals at the hourly rates of
    `DAY_RATES` (scaled so the busiest hour is `peak_rps`), cycling through `SHAPES`."""
    per_hour = np.asarray(DAY_RATES, dtype=np.float64) * peak_rps / max(DAY_RATES)
    offsets = np.concatenate([h * 3600.0 + np.arange(int(r * 3600)) / r
                              for h, r in enumerate(per_hour)])
    shapes = np.asarray(SHAPES, dtype=np.int64)[np.arange(offsets.size) % len(SHAPES)]
    return RequestTrace(offsets, shapes[:, 0].copy(), shapes[:, 1].copy())


class Rescaler(Protocol):
    """The backend side: the one rescale path, and the job's status written under its lock."""

    def scale_job(self, namespace: str, name: str, replicas: int, *,
                  planned: bool = ...) -> Any: ...

    def write_load(self, uid: str, status: dict[str, Any], *, keep_message: bool) -> None: ...


@dataclass(frozen=True)
class Served:
    """One autoscaled job as a step sees it (copied under the backend's lock)."""

    uid: str
    namespace: str
    name: str
    spec: InferenceJobSpec
    created_s: float
    placed: int  # replicas holding chips


@dataclass
class _Service:
    last_s: float
    backlog_s: float = 0.0  # one replica's queued prefill work the last window left
    window: deque[Observation] = field(default_factory=deque)
    history: tuple[tuple[float, int], ...] = ()


def autoscaling_of(spec: InferenceJobSpec) -> Autoscaling | None:
    a = spec.autoscaling
    if a is None:
        return None
    return Autoscaling(min_replicas=a.min_replicas, max_replicas=a.max_replicas,
                       objective=Objective(a.objective.time_to_first_token_ms,
                                           a.objective.time_per_output_token_ms),
                       scale_down_delay_s=float(a.scale_down_delay_seconds))


class Autoscaler:
    """Offered load and planner state per autoscaled job; `step` reads, plans and writes."""

    def __init__(self, trace: Callable[[], RequestTrace], *, rate_scale: float = 1.0,
                 every_s: float = 30.0, window: int = 10) -> None:
        self._read_trace = trace  # read at the first autoscaled job: most fleets have none
        self._trace: RequestTrace | None = None
        self.rate_scale = rate_scale
        self.every_s = every_s
        self.window = window
        self.services: dict[str, _Service] = {}

    @property
    def trace(self) -> RequestTrace:
        if self._trace is None:
            self._trace = self._read_trace()
        return self._trace

    def step(self, now: float, jobs: list[Served], backend: Rescaler) -> list[Decision]:
        """One planner step at simulated time `now` for each job whose window is due."""
        decisions: list[Decision] = []
        seen = {j.uid for j in jobs}
        for uid in [u for u in self.services if u not in seen]:
            del self.services[uid]  # finished, deleted or no longer autoscaled
        for job in jobs:
            autoscaling = autoscaling_of(job.spec)
            if autoscaling is None:
                continue
            service = self.services.setdefault(job.uid, _Service(last_s=now))
            if now - service.last_s < self.every_s:
                continue
            try:
                decision = self._plan(job, service, autoscaling, now, backend)
            except Exception as exc:  # one job's bad model must not stop the others
                log.warning("%s/%s: no autoscaling this step: %s", job.namespace, job.name, exc)
                continue
            decisions.append(decision)
        return decisions

    def load(self, job: Served, service: _Service, objective: Objective, now: float) -> Load:
        """The window [last step, now): the trace's requests over the placed replicas."""
        t0, t1 = service.last_s - job.created_s, now - job.created_s
        seconds = now - service.last_s
        prompts, outputs = self.trace.between(t0, t1, self.rate_scale)
        n = int(prompts.size)
        mix = (TokenMix.from_samples(prompts.astype(np.float64), outputs.astype(np.float64))
               if n else None)
        ttft = tpot = attained = None
        if mix is not None and job.placed > 0:
            e = estimate(replica_of(job.spec), mix, [(seconds, n / seconds / job.placed)],
                         backlog_s=service.backlog_s)
            service.backlog_s = e.final_backlog_s
            ttft, tpot = e.ttft_quantile(0.99) * 1e3, e.tpot_quantile(0.99) * 1e3
            attained = ((1.0 - e.ttft_exceedance(objective.ttft_ms / 1e3))
                        * (1.0 - e.tpot_exceedance(objective.tpot_ms / 1e3)))
        else:
            service.backlog_s = max(service.backlog_s - seconds, 0.0)
        return Load(start_s=service.last_s, seconds=seconds, requests_per_second=n / seconds,
                    prompt_tokens_per_request=float(prompts.mean()) if n else None,
                    output_tokens_per_request=float(outputs.mean()) if n else None,
                    ttft_p99_ms=ttft, tpot_p99_ms=tpot, slo_attainment=attained, mix=mix,
                    replicas=job.placed)

    def _plan(self, job: Served, service: _Service, autoscaling: Autoscaling, now: float,
              backend: Rescaler) -> Decision:
        load = self.load(job, service, autoscaling.objective, now)
        service.last_s = now
        service.window.append(load.observation())
        while len(service.window) > self.window:
            service.window.popleft()
        current = job.spec.replicas
        decision = plan(replica_of(job.spec), list(service.window), autoscaling,
                        current=current, history=service.history)
        service.history = decision.history
        if decision.replicas != current:
            backend.scale_job(job.namespace, job.name, decision.replicas, planned=True)
        head = (f"scaled {current} → {decision.replicas}" if decision.replicas != current
                else f"kept {current}")
        message = (f"{head}: forecast {decision.forecast_rate:,.0f} req/s (offered "
                   f"{load.requests_per_second:,.1f} req/s); {decision.reason}")
        # while kept replicas still wait to be placed, the core's message says why: keep it
        keep = decision.replicas == current and job.placed < current
        backend.write_load(job.uid, {"load": load.status(), "desiredReplicas": decision.replicas,
                                     "scalingMessage": message}, keep_message=keep)
        return decision


def replica_of(spec: InferenceJobSpec) -> Replica:
    """The replica the job's spec describes (the operator's reading of its wire spec)."""
    wire = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    model = wire.get("model") or {}
    return replica_for(str(model.get("name", "")), chips=int(wire["chipsPerReplica"]),
                       profile=wire.get("profile"),
                       parameters_b=model.get("parametersBillions"))
