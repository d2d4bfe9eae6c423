"""Reference replays a policy is measured against: a fluid bound and an in-domain greedy.

Why in every run: a replay's JCT or utilization means little on its own (it depends on the
trace and the fleet size), so each `ultraplane simulate` also replays the same jobs, in the
same run, through two simple schedulers with no overheads (no checkpoints, restarts, faults
or slowdowns) and reports the policy's figures as ratios to them:

- **fluid** (no topology): chips are fungible; a job starts as soon as the fleet has that
  many free chips anywhere. Jobs are tried in arrival order and every one that fits starts
  (greedy backfill). It is the reference "what placement could never beat by packing".
- **greedy in one domain**: what a platform team would write first. Jobs in arrival order,
  every one that fits starts: a job of at most one UltraServer takes the first UltraServer
  (in fleet order) with that many free chips (chips inside an UltraServer are fungible);
  a larger one takes the first idle UltraServers it needs, the last one partly. It never
  splits a job that fits one UltraServer, and it never reserves anything.

Both are plain event loops over (time, kind, seq) with one clock, like `events.Engine`, and
only one candidate per job size is tested at each instant (the oldest of each size: if it
does not fit, no later job of that size does), so a 15,000-job trace replays in a second.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from ultraplane.simulator.traces import TraceJob

__all__ = ["BoundResult", "fluid_bound", "greedy_in_domain"]


@dataclass(frozen=True)
class BoundResult:
    name: str
    jobs: int  # jobs that ran (jobs larger than the fleet are left out, as the replay rejects)
    jct_mean_s: float
    queue_delay_mean_s: float
    large_jobs_queue_delay_mean_s: float
    useful_utilization: float  # trace chip-seconds / (fleet chips x makespan)
    makespan_s: float

    def as_dict(self) -> dict[str, float | int | str]:
        return {
            "name": self.name, "jobs": self.jobs, "jct_mean_s": self.jct_mean_s,
            "queue_delay_mean_s": self.queue_delay_mean_s,
            "large_jobs_queue_delay_mean_s": self.large_jobs_queue_delay_mean_s,
            "useful_utilization": self.useful_utilization, "makespan_s": self.makespan_s,
        }


class _Fleet:
    """Free chips per UltraServer; `one_pool` makes it a single fungible pool."""

    def __init__(self, sizes: Sequence[int]) -> None:
        self.sizes = list(sizes)
        self.free = list(sizes)
        self.biggest = max(sizes, default=0)

    def take(self, chips: int) -> list[tuple[int, int]] | None:
        if chips <= self.biggest:
            for i, f in enumerate(self.free):
                if f >= chips:
                    self.free[i] -= chips
                    return [(i, chips)]
            return None
        parts: list[tuple[int, int]] = []
        left = chips
        for i, f in enumerate(self.free):
            if f == self.sizes[i] and f <= left:
                parts.append((i, f))
                left -= f
                if not left:
                    break
        if left:
            partial = next((i for i, f in enumerate(self.free)
                            if f >= left and all(i != j for j, _ in parts)), None)
            if partial is None:
                return None
            parts.append((partial, left))
        for i, n in parts:
            self.free[i] -= n
        return parts

    def give(self, parts: list[tuple[int, int]]) -> None:
        for i, n in parts:
            self.free[i] += n


def _replay(name: str, jobs: Sequence[TraceJob], chips_per_gpu: int, sizes: Sequence[int],
            large_job_chips: int) -> BoundResult:
    fleet = _Fleet(sizes)
    total = sum(sizes)
    events: list[tuple[float, int, int]] = []  # (time, 0 = end / 1 = arrival, job index)
    for i, job in enumerate(jobs):
        if job.gpus * chips_per_gpu <= total:
            heapq.heappush(events, (job.submit_s, 1, i))
    waiting: dict[int, deque[int]] = {}  # chips -> job indexes in arrival order
    held: dict[int, list[tuple[int, int]]] = {}
    start: dict[int, float] = {}
    end: dict[int, float] = {}
    while events:
        t = events[0][0]
        while events and events[0][0] == t:
            _, kind, i = heapq.heappop(events)
            if kind == 0:
                fleet.give(held.pop(i))
            else:
                waiting.setdefault(jobs[i].gpus * chips_per_gpu, deque()).append(i)
        while True:
            heads = sorted((q[0], c) for c, q in waiting.items() if q)
            started = False
            for i, chips in heads:
                parts = fleet.take(chips)
                if parts is None:
                    continue
                waiting[chips].popleft()
                held[i], start[i] = parts, t
                end[i] = t + jobs[i].duration_s
                heapq.heappush(events, (end[i], 0, i))
                started = True
                break  # the fleet changed: the oldest head that fits may be an earlier one
            if not started:
                break
    ran = list(start)
    if not ran:
        return BoundResult(name, 0, 0.0, 0.0, 0.0, 0.0, 0.0)
    t0 = min(jobs[i].submit_s for i in ran)
    span = max(max(end.values()) - t0, 1e-9)
    work = sum(jobs[i].gpus * chips_per_gpu * jobs[i].duration_s for i in ran)
    waits = [start[i] - jobs[i].submit_s for i in ran]
    large = [start[i] - jobs[i].submit_s for i in ran
             if jobs[i].gpus * chips_per_gpu >= large_job_chips]
    return BoundResult(
        name, len(ran), sum(end[i] - jobs[i].submit_s for i in ran) / len(ran),
        sum(waits) / len(waits), sum(large) / len(large) if large else 0.0,
        work / (total * span), span)


def fluid_bound(jobs: Sequence[TraceJob], chips_per_gpu: int, fleet_chips: int,
                large_job_chips: int) -> BoundResult:
    """Chips fungible across the whole fleet (no topology), no overheads."""
    return _replay("fluid", jobs, chips_per_gpu, [fleet_chips], large_job_chips)


def greedy_in_domain(jobs: Sequence[TraceJob], chips_per_gpu: int,
                     ultraserver_chips: Sequence[int], large_job_chips: int) -> BoundResult:
    """First fit inside one UltraServer, arrival order, no overheads (module docstring)."""
    return _replay("greedy-in-domain", jobs, chips_per_gpu, ultraserver_chips, large_job_chips)
