"""Moves: running jobs taken off an UltraServer and placed at once elsewhere, so that a job
within its tenant queue's unused quota finds one domain for its gang.

Why a policy of its own: a quota counts chips, but a gang needs its chips inside one domain.
A queue's unused quota is often fragments on UltraServers whose other chips belong to teams
within their own quota; reclaim may not evict those jobs (`ultraplane.policies.reclaims`),
so without moves the guaranteed job reserves a domain and waits for long jobs to end. A move
keeps the moved job running (it does not go back to the queue) and costs it its work since
its last checkpoint, or only the save when it checkpoints on notice, plus a restart (the
hardware profile's `restart_seconds`). The plan with the lowest total cost in chip-seconds
wins, then the fewest moves (`ultraplane.placement.moveplans`).

The rules a fleet operator who honours every team's contract wants:
- only for a job of a tenant queue that stays within its nominal quota once admitted, one
  gang, after reclaim found no domain, and only when its predicted wait without a move is
  longer than `threshold_s` (a job whose domain drains soon waits instead);
- only jobs that allow it (`QueuedJob.may_move`: `spec.movable`, by default when
  preemptible), one gang each, not one started this cycle, and none moved within the last
  `interval_s`;
- every move is a decision (`CycleResult.moved`) naming the job it made room for.
Without tenant queues, or with moves off, nothing here runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from ultraplane.hardware.profiles import load_profile
from ultraplane.ids import JobKey
from ultraplane.placement.allocator import Allocator, NoFit, Placement, PlacementRequest
from ultraplane.placement.moveplans import Movable, plan_moves
from ultraplane.scheduling.cycles import CycleResult, CycleState
from ultraplane.scheduling.quotagates import QuotaGate
from ultraplane.scheduling.rosters import Roster
from ultraplane.workloads import QueuedJob

__all__ = ["MoveRules", "Moves"]


@dataclass(frozen=True)
class MoveRules:
    """When moves are made: `enabled`; a job moved at most once per `interval_s`; a plan used
    only when the waiting job's predicted wait without it exceeds `threshold_s`."""

    enabled: bool = False
    interval_s: float = 3600.0
    threshold_s: float = 600.0

    def __post_init__(self) -> None:
        if self.interval_s < 0 or self.threshold_s < 0:
            raise ValueError("move interval and threshold must be 0 or positive seconds")


class Moves:
    """The defragmentation policy of one scheduler."""

    def __init__(self, allocator: Allocator, roster: Roster, state: CycleState,
                 quotas: QuotaGate, rules: MoveRules) -> None:
        self._allocator = allocator
        self._roster = roster
        self._state = state
        self._quotas = quotas
        self.rules = rules
        self.last: dict[JobKey, float] = {}  # when each job was last moved
        self._restart: dict[str, float] = {}  # profile -> restart seconds
        # (queue, request, room epoch) that found no plan: the same finds none until room
        # moves (the queue decides who may be evicted)
        self._no_plan: set[tuple[str | None, PlacementRequest, int]] = set()

    def may_move(self, job: QueuedJob) -> bool:
        """Whether moves may serve `job` (queues on, within nominal, one gang, a clock)."""
        return (self.rules.enabled and self._state.now is not None
                and self._quotas.guaranteed(job))

    def move_for(self, job: QueuedJob, nofit: NoFit, result: CycleResult
                 ) -> tuple[Placement, ...] | NoFit:
        """Place `job` by moving running jobs out of one domain, or `nofit` unchanged."""
        now = self._state.now
        if now is None or not self.may_move(job):
            return nofit
        memo = (job.queue, job.request, self._allocator.room_epoch)
        if memo in self._no_plan or self._wait(job, now) <= self.rules.threshold_s:
            return nofit
        plan = plan_moves(self._allocator, job.key, job.request, self._candidates(job, now))
        if plan is None:
            self._no_plan.add((job.queue, job.request, self._allocator.room_epoch))
            return nofit
        roster = self._roster
        for key in plan.evicted:  # borrowers reclaimed for it: they wait again
            roster.requeue(key)
            result.preempted.append((key, job.key))
        for key, old, new in plan.moves:
            moved = roster.running[key]
            lost = self._loss(moved, now)
            end = roster.ends.get(key)
            roster.hold(moved)  # the ledgers see its new UltraServers
            roster.since[key] = now
            if end is not None:
                roster.ends[key] = end + lost + self._restart_s(old)
            self.last[key] = now
            result.moved.append((key, job.key, new, old.ultraservers, lost))
        roster.epoch += 1  # what a carried cycle decided no longer stands
        self._state.forget_failures()
        return (plan.placement,)

    def _candidates(self, job: QueuedJob, now: float) -> dict[JobKey, Movable]:
        """The jobs a plan may take off their chips: the borrowers `job` may reclaim
        (evicted), and every other job that allows a move (moved)."""
        out: dict[JobKey, Movable] = {}
        held = self._allocator.allocations()
        book = self._quotas.book
        for victim in book.victims(job) if book is not None else ():
            if victim.replicas is None and victim.key in held:
                cost = (self._loss(victim, now) + self._restart_s(held[victim.key])
                        ) * victim.request.chips
                out[victim.key] = Movable(victim.request, cost, evict=True,
                                          move=self._may_move_now(victim, now))
        for key, other in self._roster.running.items():
            if key in out or key == job.key or key not in held:
                continue
            if not self._may_move_now(other, now):
                continue
            cost = (self._loss(other, now) + self._restart_s(held[key])) * other.request.chips
            out[key] = Movable(other.request, cost)
        return out

    def _may_move_now(self, job: QueuedJob, now: float) -> bool:
        """Whether `job` allows a move, is one gang, started before this cycle and was not
        moved within the interval."""
        since = self._roster.since.get(job.key, now)
        interval = self.rules.interval_s
        # `since` None: re-adopted after a restart, started at a time unknown but before now
        # (movable when its loss can be bounded, `_loss`)
        started = since < now if since is not None else self._loss(job, now) != float("inf")
        return (job.may_move and job.replicas is None and started
                and now - self.last.get(job.key, -interval) >= interval)

    def _loss(self, job: QueuedJob, now: float) -> float:
        """Seconds of work `job` loses if moved now: the save when it checkpoints on notice,
        else its work since its last periodic checkpoint (all of it without checkpoints)."""
        if job.notice_s is not None:
            return job.notice_s
        since = self._roster.since.get(job.key)
        if since is None and job.key in self._roster.since:
            # re-adopted after a restart, its start unknown: at most a checkpoint interval
            return job.checkpoint_s if job.checkpoint_s else float("inf")
        elapsed = max(now - since, 0.0) if since is not None else 0.0
        every = job.checkpoint_s
        return elapsed % every if every else elapsed

    def _restart_s(self, placement: Placement) -> float:
        profile = self._allocator.profile_of(placement.ultraservers[0])
        if profile not in self._restart:
            self._restart[profile] = float(load_profile(profile).chip.restart_seconds)
        return self._restart[profile]

    def _wait(self, job: QueuedJob, now: float) -> float:
        """Predicted wait of `job` without a move: the soonest any of its domains has its
        chips free, from the running jobs' predicted ends (one without an end never frees)."""
        need = job.request.chips
        releases = self._roster.releases()
        best = float("inf")
        for _, names in self._allocator.preemption_domains(job.request):
            free = self._allocator.free_chips(names)
            if free >= need:  # the chips are there but not in its shape: no telling when
                return 0.0
            ends = sorted(e for n in names for e in releases.get(n, ()))
            for end, chips in ends:
                if end - now >= best:
                    break
                free += chips
                if free >= need:
                    best = min(best, end - now)
        return max(best, 0.0)
