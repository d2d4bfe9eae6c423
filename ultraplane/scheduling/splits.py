"""Split pricing: a `SplitWhenItPays` job that fits no single UltraServer, split if it pays.

Why: a gang spread over several UltraServers runs slower (its communication crosses EFA, see
`predictions.split_slowdown`), but it may still finish sooner than one that waits for a
whole UltraServer to drain. The job is split when the predicted cost of the split (run time
x (slowdown - 1)) is less than the predicted wait for one UltraServer (by the running jobs'
predicted ends, from the cycle's clock), or when no wait can be predicted; the reason goes
into the cycle's notes or the job's pending message either way.
"""

from __future__ import annotations

import math
from dataclasses import replace as dc_replace

from ultraplane.placement.allocator import Allocator, NoFit, Placement
from ultraplane.scheduling.cycles import CycleResult, CycleState
from ultraplane.scheduling.powergates import PowerGate
from ultraplane.scheduling.predictions import earliest_start, placed_slowdown, span
from ultraplane.scheduling.rosters import Roster
from ultraplane.workloads import QueuedJob

__all__ = ["Splits"]


class Splits:
    """Split pricing for one scheduler's cycles."""

    def __init__(self, allocator: Allocator, roster: Roster, state: CycleState,
                 power: PowerGate) -> None:
        self._allocator = allocator
        self._roster = roster
        self._state = state
        self._power = power

    def split(self, job: QueuedJob, nofit: NoFit, result: CycleResult
              ) -> tuple[Placement, ...] | NoFit:
        """SplitWhenItPays: split when the predicted cost of the split (run time x
        (slowdown - 1)) is less than the predicted wait for one UltraServer."""
        wide = dc_replace(job.request, mode="Unconstrained")
        split = self._allocator.place(wide)
        if isinstance(split, NoFit):
            return nofit
        slow = placed_slowdown(self._allocator, split, job.request.chips)
        n = len(split.ultraservers)
        wait: float | None = None
        now = self._state.now
        if now is not None:
            free = self._allocator.free_by_ultraserver(job.request)
            releases = self._roster.releases()
            start = earliest_start({u: (f, releases.get(u, [])) for u, f in free.items()},
                                   job.request.chips, now)
            wait = None if start == math.inf else start - now
        run = job.expected_s
        if run is None:
            pays = wait is None  # nothing to price the split with: split only if no wait is known
            why = ("no run time is known to price the split"
                   + ("" if pays else f" and one UltraServer is predicted free in {span(wait)}"))
        else:
            cost = run * (slow - 1.0)
            pays = wait is None or cost < wait
            shown = "unknown (no running job there has a predicted end)" if wait is None \
                else span(wait)
            why = (f"the predicted slowdown {slow:.2f}x over {n} UltraServers costs "
                   f"{span(cost)}; the predicted wait for one UltraServer is {shown}")
        if not pays:
            return NoFit(nofit.kind, f"{nofit.message}; waiting for one UltraServer rather than "
                         f"splitting: {why}", nofit.blocking)
        placed = self._allocator.allocate(job.key, wide)
        if isinstance(placed, NoFit):  # cannot differ from place() on the same state
            return nofit
        refused = self._power.refuses(job, (placed,))
        if refused is not None:
            self._allocator.release(job.key)
            return refused
        result.notes[job.key] = f"split over {n} UltraServers because it pays: {why}"
        return (placed,)
