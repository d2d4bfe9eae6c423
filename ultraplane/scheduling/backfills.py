"""EASY backfill: a job that fits only on reserved UltraServers, if it ends before they are due.

Why: a reservation (`reservations`) fences its UltraServers off from the jobs behind it
while they drain, and their free chips idle meanwhile. A job predicted to end before the
reservation starts (from the cycle's clock, its expected run time and the slowdown of where
it would go) delays nobody, so it may use them (Slurm's and EASY's backfill rule). With
several reservations (tenant queues), only those it ends before are opened to it.
"""

from __future__ import annotations

import math

from ultraplane.placement.allocator import Allocator, NoFit, Placement
from ultraplane.scheduling.cycles import CycleResult, CycleState
from ultraplane.scheduling.powergates import PowerGate
from ultraplane.scheduling.predictions import placed_slowdown, span
from ultraplane.scheduling.reservations import Reservations
from ultraplane.workloads import QueuedJob

__all__ = ["Backfills"]


class Backfills:
    """Backfill onto the reserved UltraServers of one scheduler's cycles."""

    def __init__(self, allocator: Allocator, state: CycleState, reservations: Reservations,
                 power: PowerGate) -> None:
        self._allocator = allocator
        self._state = state
        self._reservations = reservations
        self._power = power

    def backfill(self, job: QueuedJob, nofit: NoFit, result: CycleResult
                 ) -> tuple[Placement, ...] | NoFit:
        """EASY's backfill rule: a job that fits only on the reserved UltraServers may go
        there if it is predicted to end before the reservation starts (with several
        reservations, only on those it ends before)."""
        shadows = self._reservations.shadows
        known = {us: s for us in self._reservations.fenced if (s := shadows.get(us)) is not None}
        now = self._state.now
        if not known or now is None or job.expected_s is None:
            return nofit
        unslowed = now + job.expected_s
        opened = [us for us, s in known.items() if unslowed <= s]
        if not opened or len(opened) < len(known):
            # a later start could open (more of) the reserved UltraServers to it: a cycle
            # that carries it over must not see the reservation's lead reach its run time
            self._reservations.lead = min(self._reservations.lead, job.expected_s)
        if not opened:
            # ends after every reservation starts even unslowed: no placement to look for
            return NoFit(nofit.kind, f"{nofit.message}; it is predicted to end "
                         f"{span(unslowed - max(known.values()))} after the "
                         "reservation starts", nofit.blocking)
        tried = (job.request, frozenset(opened))
        if tried in self._state.no_backfill:
            return nofit
        with self._allocator.lifted(opened):
            got = self._allocator.place(job.request)
            if isinstance(got, NoFit):
                self._state.no_backfill.add(tried)
                return nofit
            slow = placed_slowdown(self._allocator, got, job.request.chips)
            end = now + job.expected_s * slow
            shadow = min((known[us] for us in got.ultraservers if us in known), default=math.inf)
            if end > shadow:  # (its slowdown is at least 1)
                self._reservations.lead = min(self._reservations.lead, job.expected_s)
                return NoFit(nofit.kind, f"{nofit.message}; it would fit on the reserved "
                             f"UltraServers but is predicted to end {span(end - shadow)} "
                             "after the reservation starts", nofit.blocking)
            placed = self._allocator.allocate(job.key, job.request)
        if isinstance(placed, NoFit):
            return nofit
        refused = self._power.refuses(job, (placed,))
        if refused is not None:
            self._allocator.release(job.key)
            return refused
        result.notes[job.key] = (f"backfilled onto UltraServers reserved for a waiting job: "
                                 f"predicted to end {span(shadow - end)} before it starts")
        return (placed,)
