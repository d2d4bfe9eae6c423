"""A service under one scaling policy: which replicas serve, and how many it asks for.

Why the policies are here side by side: the replay compares them on the same fleet and
trace, so they must see the same windows and act through the same cycle. Each decides from
what a cluster observes, at its own sync:

- `ultraplane`: the core's planner (`ultraplane.serving.planners.plan`) every `SYNC_S` on
  the last `LOOKBACK_S` of per-minute observations (the current minute so far included),
  with its recommendations handed back; its per-chip cap applies to every replica.
- `static-peak`: the fewest replicas meeting both objectives on the trace's busiest minute
  (`baselines.static_peak`), all the time, uncapped.
- `hpa`: the Kubernetes HPA algorithm (`baselines.Hpa`) every 15 s on the replicas'
  utilization, replicas still starting counted at 0% (as the HPA counts pods not yet ready
  when it scales up).

A service with fixed `replicas` (no autoscaling) keeps them under every policy. An
autoscaled one starts at `replicas` when given, else at what static-peak's rule gives for
its first minute (all policies alike), already serving: the replay starts with a warm
service, and every replica added later pays the start-up time.
"""

from __future__ import annotations

import math

from ultraplane.simulator.requestwindows import SHAPE_S, Windows, load_requests, windows_of
from ultraplane.simulator.servicefiles import ServiceSpec
from ultraplane.simulator.servicestates import ServiceFigures, evaluate, windows_mix

from ultraplane.ids import JobKey
from ultraplane.serving.baselines import Hpa, HpaState, static_peak
from ultraplane.serving.llms import language_model
from ultraplane.serving.mixes import Observation
from ultraplane.serving.planners import Autoscaling, Objective, plan
from ultraplane.serving.replicas import Replica, replica_of

__all__ = ["LOOKBACK_S", "SERVICE_POLICIES", "SYNC_S", "WINDOW_S", "Service"]

SERVICE_POLICIES = ("ultraplane", "static-peak", "hpa")
WINDOW_S = 15.0  # a window of the fluid model, and the HPA's sync period
SYNC_S = 15.0  # the planner's period
LOOKBACK_S = 300.0  # the observations the planner reads


class Service:
    """One service's replicas, load and figures in one replay."""

    def __init__(self, spec: ServiceSpec, policy: str, profile: str, start_s: float) -> None:
        if policy not in SERVICE_POLICIES:
            raise ValueError(f"unknown service policy {policy!r}")
        self.spec, self.policy = spec, policy
        self.key = JobKey(spec.name)
        self.replica: Replica = replica_of(language_model(spec.model), spec.profile or profile,
                                           spec.chips_per_replica, str(spec.precision.value))
        self.start_s = start_s
        self.end_s = start_s + spec.duration_seconds
        req = spec.requests
        self.windows: Windows = windows_of(
            load_requests(req.trace), window_s=WINDOW_S, rate_scale=req.rate_scale,
            loop=req.loop, duration_s=spec.duration_seconds)
        a = spec.autoscaling
        self.objective = Objective(a.objective.time_to_first_token_ms,
                                   a.objective.time_per_output_token_ms) if a else None
        self.autoscaling = (Autoscaling(a.min_replicas, a.max_replicas, self.objective,
                                        float(a.scale_down_delay_seconds))
                            if a is not None and self.objective is not None else None)
        self.hpa = Hpa(a.min_replicas, a.max_replicas) if a is not None else None
        self.hpa_state = HpaState()
        self.history: tuple[tuple[float, int], ...] = ()
        self.cap: float | None = None
        self.reason = ""
        self.ready: list[float] = []  # per replica index: when it serves from
        self.asked: dict[int, float] = {}  # replica index -> when its scale-up was decided
        self.per_us: list[dict[str, int]] = []  # per replica index: chips per UltraServer
        self.backlog_total_s = 0.0
        self.index = 0  # the next window
        self.figures = ServiceFigures()
        self.extra_w = 0.0  # the draw over idle it adds to the fleet now
        self.util = 0.0  # the last window's utilization of the serving replicas
        self.serving_now = 0.0  # replicas that served the last window (shares of one)
        self.static = self._static(self._minutes(len(self.windows)))
        self.initial = (spec.replicas if spec.replicas is not None
                        else self.static if policy == "static-peak" or a is None
                        else self._static(self._minutes(round(SHAPE_S / WINDOW_S))))

    # -- what a cluster observes ------------------------------------------------------
    def _minutes(self, windows: int, first: int = 0) -> list[Observation]:
        """Per-minute observations of windows `first` (a minute's first) to `windows` (a
        partial last minute)."""
        per = round(SHAPE_S / WINDOW_S)
        w = self.windows
        out: list[Observation] = []
        for lo in range(first, min(windows, len(w)), per):
            hi = min(lo + per, windows, len(w))
            n = round(float(w.requests[lo:hi].sum()))
            mix = windows_mix(w, hi - 1)
            start = self.start_s + lo * WINDOW_S
            out.append(Observation(start, (hi - lo) * WINDOW_S, n, mix if n > 0 else None))
        return out

    def _static(self, minutes: list[Observation]) -> int:
        a, obj = self.autoscaling, self.objective
        if a is None or obj is None:
            return self.spec.replicas or 1
        if not any(o.requests for o in minutes):
            return max(a.min_replicas, 1)
        return static_peak(self.replica, minutes, obj, a.min_replicas, a.max_replicas)

    # -- the replicas -----------------------------------------------------------------
    @property
    def held(self) -> int:
        return len(self.ready)

    def placed(self, index: int, per_us: dict[str, int], t: float, *, warm: bool) -> None:
        """Replica `index` holds chips from `t`; it serves after its start-up (at once when
        `warm`: the service's first replicas)."""
        while len(self.ready) <= index:
            self.ready.append(math.inf)
            self.per_us.append({})
        self.per_us[index] = per_us
        if warm:
            self.ready[index] = t
            return
        self.ready[index] = t + self.replica.startup_s
        self.figures.waits_s.append(self.ready[index] - self.asked.pop(index, t))

    def shrunk(self, replicas: int) -> list[dict[str, int]]:
        """Replicas from `replicas` up were removed; returns their chips per UltraServer."""
        gone = self.per_us[replicas:]
        del self.ready[replicas:], self.per_us[replicas:]
        for i in [i for i in self.asked if i >= replicas]:
            del self.asked[i]
        return gone

    def lost(self) -> list[dict[str, int]]:
        """Every replica was preempted (the service waits again): what they held."""
        return self.shrunk(0)

    # -- one window -------------------------------------------------------------------
    def serve_window(self, t: float) -> None:
        """Price the window ending at `t` and count it."""
        w, i, seconds = self.windows, self.index, WINDOW_S
        self.index += 1
        start = t - seconds
        serving = sum(min(max((t - max(r, start)) / seconds, 0.0), 1.0) for r in self.ready)
        requests = float(w.requests[i]) if i < len(w) else 0.0
        mix = windows_mix(w, i) if i < len(w) else None
        idle = self.replica.idle_watts
        load = None
        watts = self.held * idle
        if requests > 0 and mix is not None and serving > 0:
            load = evaluate(self.replica, mix, seconds, requests / seconds / serving, self.cap,
                            self.backlog_total_s / serving, self._objective())
            self.backlog_total_s = load.backlog_s * serving
            self.util = load.utilization
            watts = serving * load.watts + (self.held - serving) * idle
        elif requests > 0 and mix is not None:  # nothing serves: every request waits
            one = evaluate(self.replica, mix, seconds, requests / seconds, self.cap, 0.0,
                           self._objective())
            self.backlog_total_s += one.utilization * seconds
            self.util = 0.0
        else:
            self.backlog_total_s = max(self.backlog_total_s - serving * seconds, 0.0)
            self.util = 0.0
        self.serving_now = serving
        mean_out = float(w.mean_output[i]) if i < len(w) else 0.0
        self.figures.add(t, requests, mean_out, load, serving, self.held, watts, seconds)
        self.extra_w = watts - self.held * idle

    def _objective(self) -> Objective:
        return self.objective or Objective(math.inf, math.inf)

    # -- the policy -------------------------------------------------------------------
    def decide(self, t: float, wanted: int) -> int:
        """The replica count the policy wants at `t` (`wanted`: the count last asked for)."""
        a = self.autoscaling
        if a is None:
            return wanted
        if self.policy == "static-peak":
            return self.static
        if self.policy == "hpa":
            assert self.hpa is not None
            serving = self.serving_now
            if wanted <= 0 or serving <= 0:
                return wanted
            usage = self.util * serving / wanted  # replicas not yet serving count at 0%
            got, self.hpa_state = self.hpa.step(self.hpa_state, t, wanted, usage)
            self.reason = f"hpa: utilization {usage:.0%} against a 70% target"
            return got
        if self.index % round(SYNC_S / WINDOW_S):
            return wanted
        first = max(self.index - round(LOOKBACK_S / WINDOW_S), 0)
        per = round(SHAPE_S / WINDOW_S)
        first -= first % per
        window = self._minutes(self.index, first)
        ready = sum(1 for r in self.ready if r <= t)
        d = plan(self.replica, window, a, current=ready, history=self.history,
                 backlog_s=self.backlog_total_s)
        self.history, self.cap, self.reason = d.history, d.cap_watts, d.reason
        return d.replicas
