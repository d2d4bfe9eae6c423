"""Making headroom for a job its power budgets refuse: reserving it for the cycle (EASY), and
choosing whom to evict for a job that may preempt.

The rules:
- Headroom reservation (EASY, as the scheduler's chip reservation): the first job of a cycle
  refused for headroom reserves it, so a stream of small jobs cannot starve a large one. Its
  start is predicted from running jobs' predicted ends (when enough of its budgets' draw
  ends). For the rest of the cycle a job of its priority or lower that draws from those
  budgets is admitted only if it is predicted to end before that start, or takes only what
  will be spare then (what the jobs ending by then give back beyond its shortfall, as EASY's
  backfill onto nodes the reserved job will not need). A job that would not
  fit its budgets even alone reserves nothing (it would hold them forever).
- A job that may preempt and is refused evicts lower-priority jobs drawing from its short
  budgets, the caller's best victims first, when that makes it fit (`to_evict`).

Why apart from the book's accounting (`ultraplane.policies.powerbook`): both answer "what would
free enough headroom, and when", from the book's predictions, and change nothing the book
counts except this cycle's reservation; the admission check only asks `_reserved_for`.

Why a mixin of `PowerBook` and not an object it holds: the scheduler and the adapters call
`begin_cycle`, `reserve`, `to_evict` and read `reserved` on the book, and every rule here is
written in the book's predictions (`_least`, `_counted`) over the jobs it holds; held, it would
reach back into the book for each of them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from ultraplane.ids import JobKey
from ultraplane.placement.allocator import NoFit, Placement
from ultraplane.policies.powerbudgets import BudgetSpec

if TYPE_CHECKING:
    from ultraplane.policies.powerbook import _Held

__all__ = ["NO_POWER", "HeadroomReservations"]

# the NoFit kind of a job no budget covering its chips has headroom for (the book exports it)
NO_POWER: Final = "NoPower"


@dataclass
class _Reserved:
    """This cycle's headroom reservation: the job, the budgets it waits for, its predicted
    start (None: not predicted), and per budget the spare watts at that start (what the jobs
    predicted to end by then give back beyond its shortfall), which later jobs may take."""

    job: _Held
    budgets: frozenset[str]
    start: float | None
    spare: dict[str, float]
    taking: dict[JobKey, dict[str, float]] = field(default_factory=dict)  # allowed, not held


class HeadroomReservations:
    """The power book's headroom reservation and eviction."""

    # the book's state (`ultraplane.policies.powerbook`)
    specs: dict[str, BudgetSpec]
    reserved: _Reserved | None
    _members: dict[str, frozenset[str]]
    _of_us: dict[str, tuple[str, ...]]
    _jobs: dict[JobKey, _Held]

    if TYPE_CHECKING:  # the book's predictions, from `ultraplane.policies.powerbook`
        def _held(self, key: JobKey, priority: int, placements: Sequence[Placement]) -> _Held: ...
        def _inside(self, name: str) -> list[_Held]: ...
        def _counted(self, name: str, held: _Held, new: _Held) -> float: ...
        def _least(self, name: str, new: _Held, *, alone: bool = False) -> float: ...

    def _reserved_for(self, held: _Held, end: float | None) -> NoFit | None:
        """A `NoPower` NoFit when this cycle's reservation holds the headroom `held` would
        take: it draws from a reserved budget, ranks no higher, and is not predicted to end
        before the reserved job starts."""
        r = self.reserved
        if r is None or r.job.key == held.key or held.priority > r.job.priority:
            return None
        hit = sorted(r.budgets & {b for us in held.per_us for b in self._of_us.get(us, ())})
        if not hit or (r.start is not None and end is not None and end <= r.start):
            return None
        take = {n: self._counted(n, held, r.job) for n in hit}
        if all(w <= r.spare[n] + 1e-6 for n, w in take.items()):
            r.taking[held.key] = take  # spent when it is held
            return None
        return NoFit(NO_POWER, f"waiting for headroom in budget {hit[0]}: it is reserved for "
                     f"job {r.job.key}, which waits for it, and this job is "
                     + ("not predicted to end before that job starts" if r.start is not None
                        else "not predicted to end before headroom frees"))

    def begin_cycle(self) -> None:
        """A scheduling cycle starts: last cycle's headroom reservation lapses."""
        self.reserved = None

    def reserve(self, key: JobKey, priority: int, placements: Sequence[Placement],
                ends: Mapping[JobKey, float], now: float | None) -> float | None:
        """Reserve headroom for a job `refuse` just refused (the first of a cycle): later
        jobs may draw from its budgets only if predicted to end before it starts. Returns its
        predicted start (from running jobs' predicted `ends`; None when not predicted); no
        reservation when it would not fit its budgets even alone."""
        new = self._held(key, priority, placements)
        over: dict[str, float] = {}
        start = -math.inf if now is None else now
        for name in {b for us in new.per_us for b in self._of_us.get(us, ())}:
            watts = self.specs[name].watts
            over[name] = self._least(name, new) - watts
            if over[name] <= 1e-6:
                del over[name]
                continue
            if self._least(name, new, alone=True) > watts + 1e-6:
                return None  # never fits while the budget stays: holding it would starve all
            # ending jobs give back what they count in `_least`, soonest end first
            freed, when = 0.0, math.inf
            for held in sorted(self._inside(name), key=lambda h: ends.get(h.key, math.inf)):
                freed += self._counted(name, held, new)
                if freed >= over[name] - 1e-6:
                    when = ends.get(held.key, math.inf)
                    break
            start = max(start, when)
        if not over:
            return None
        at = None if start in (math.inf, -math.inf) else start
        spare = dict.fromkeys(over, 0.0)
        if at is not None:
            for name in over:
                spare[name] = sum(self._counted(name, h, new) for h in self._inside(name)
                                  if ends.get(h.key, math.inf) <= at) - over[name]
        self.reserved = _Reserved(new, frozenset(over), at, spare)
        return at

    def to_evict(self, key: JobKey, priority: int, placements: Sequence[Placement],
                 pool: Sequence[JobKey]) -> list[JobKey] | None:
        """The running jobs of `pool` (the caller's victims, best first) to evict so a job
        `refuse` refused fits every budget it draws from: taken in order, skipping those
        outside the short budgets; None when evicting all of them would not be enough.
        Capping already counts them at their floor, so only eviction frees more."""
        new = self._held(key, priority, placements)
        over = {n: self._least(n, new) - self.specs[n].watts
                for n in {b for us in new.per_us for b in self._of_us.get(us, ())}}
        picked: list[JobKey] = []
        for victim in pool:
            short = [n for n, v in over.items() if v > 1e-6]
            if not short:
                break
            held = self._jobs.get(victim)
            if held is None or not any(us in self._members[n] for n in short
                                       for us in held.per_us):
                continue
            picked.append(victim)
            for n in over:
                over[n] -= self._counted(n, held, new)
        return picked if all(v <= 1e-6 for v in over.values()) else None
