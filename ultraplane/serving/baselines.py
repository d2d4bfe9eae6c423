"""The two policies the planner is measured against: a fixed fleet sized for the peak minute,
and the Kubernetes Horizontal Pod Autoscaler.

Why here and pure: the replay runs all three policies on the same fleet and trace, so the
baselines must be as exactly specified as the planner, and testable without a cluster.

- static-peak: the fewest replicas (within min and max) that meet both p99 objectives with
  the trace's busiest minute sustained; it never changes.
- hpa: the algorithm of the Kubernetes HPA (kubernetes.io, "Horizontal Pod Autoscaling",
  algorithm details; its default behavior, kubernetes/kubernetes
  pkg/apis/autoscaling/v2/defaults.go: no scale-up stabilization, 100% or 4 pods per 15 s,
  300 s scale-down stabilization): every `sync_s`,
  `desired = ceil(current x utilization / target)` unless the ratio is within `tolerance` of 1;
  scale-downs take the highest recommendation of the last `scale_down_window_s`; scale-ups
  at most `max(2 x current, current + 4)` a period; then min and max. The metric is the
  replicas' utilization: the share of their prefill capacity the offered load asks for
  (`estimates.Estimate.utilization`, above 1 when overloaded), averaged over the period.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ultraplane.serving.mixes import Observation, merge_mixes
from ultraplane.serving.planners import Objective, meets
from ultraplane.serving.replicas import Replica

__all__ = ["Hpa", "HpaState", "peak_minute", "static_peak"]


def peak_minute(observations: Sequence[Observation]) -> Observation:
    """The busiest whole minute of a trace's observations (their intervals must divide 60 s
    or be minutes themselves), with its merged token mix."""
    minutes: dict[int, list[Observation]] = {}
    for o in observations:
        minutes.setdefault(int(o.start_s // 60.0), []).append(o)
    busiest = max(minutes.values(), key=lambda os: sum(o.requests for o in os))
    seen = [o for o in busiest if o.requests > 0 and o.mix is not None]
    if not seen:
        raise ValueError("no minute of the observations has a request")
    mix = merge_mixes([o.mix for o in seen if o.mix], [o.requests for o in seen])
    seconds = sum(o.seconds for o in busiest)
    return Observation(busiest[0].start_s, seconds, sum(o.requests for o in busiest), mix)


def static_peak(replica: Replica, observations: Sequence[Observation], objective: Objective,
                min_replicas: int, max_replicas: int) -> int:
    """The fixed replica count sized for the trace's peak minute at the objective."""
    peak = peak_minute(observations)
    assert peak.mix is not None
    for n in range(max(min_replicas, 1), max_replicas + 1):
        # the minute sustained: its queue at its steady state
        if meets(replica, [(3600.0, peak.rate / n)], [peak.mix], objective)[0]:
            return n
    return max_replicas


@dataclass(frozen=True)
class HpaState:
    """The recommendations of the last scale-down window, (time, replicas)."""

    recommendations: tuple[tuple[float, int], ...] = ()


@dataclass(frozen=True)
class Hpa:
    """The Kubernetes HPA algorithm with its defaults, on replica utilization."""

    min_replicas: int
    max_replicas: int
    target: float = 0.70
    tolerance: float = 0.10
    sync_s: float = 15.0
    scale_down_window_s: float = 300.0

    def step(self, state: HpaState, now_s: float, current: int,
             utilization: float) -> tuple[int, HpaState]:
        """One sync: the replicas to run from `current` replicas at `utilization` (their
        average over the last period), and the state for the next sync."""
        if current <= 0:  # nothing runs: nothing measures; start at the floor
            return max(self.min_replicas, 1), state
        ratio = utilization / self.target
        rec = current if abs(ratio - 1.0) <= self.tolerance else math.ceil(current * ratio)
        kept = (*((t, r) for t, r in state.recommendations
                  if t > now_s - self.scale_down_window_s), (now_s, rec))
        # stabilization: up at once (a zero window), down to the highest recent recommendation
        desired = current
        if desired < rec:
            desired = rec
        desired = min(desired, max(r for _, r in kept))
        desired = min(desired, max(2 * current, current + 4))  # default scale-up policies
        return min(max(desired, self.min_replicas), self.max_replicas), HpaState(kept)
