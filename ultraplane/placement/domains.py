"""Where room may be made: the domains a preemption may clear and a reservation may hold, and
what runs and what is free on them.

Why apart from placing: these are what-if questions the scheduler asks while it plans
preemption and EASY reservations; they read the usage but never change it, and they share one
rule (`DomainQueries._domains`: each UltraServer for a gang that fits in one, else the tightest
network level with enough UltraServers) that placing does not need.

Why a mixin of `Allocator` (`ultraplane.placement.allocator`) and not an object it holds: the
methods are part of the allocator's public API that the scheduler and the adapters call, and
they read its slots, pools and search plans directly; held, each would need a forwarding method
on the allocator as well.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ultraplane.hardware.topology import CLUSTER
from ultraplane.ids import JobKey
from ultraplane.placement.placements import PlacementRequest
from ultraplane.placement.searchplans import SearchPlans
from ultraplane.placement.slots import Pool, Slot

__all__ = ["DomainQueries"]


class DomainQueries:
    """The allocator's what-if queries for preemption and reservation planning."""

    # the allocator's state (`ultraplane.placement.allocator`)
    _slots: dict[str, Slot]
    _pools: dict[tuple[str, int], Pool]
    _plans: SearchPlans

    if TYPE_CHECKING:  # the allocator's, from `ultraplane.placement.inventories`
        def _get(self, name: str) -> Slot: ...

    def preemption_domains(self, request: PlacementRequest) -> list[tuple[str, tuple[str, ...]]]:
        """Domains a preemption may clear for `request`, as (name, UltraServer names): each
        schedulable UltraServer for gangs that fit in one, else the network domains (tightest
        level that can hold enough whole UltraServers) for larger gangs."""
        return self._domains(request, whole_only=False)

    def reservation(self, request: PlacementRequest) -> tuple[str, tuple[str, ...]] | None:
        """Where a gang of whole UltraServers that does not fit now would start soonest, as
        (domain name, UltraServer names): inside the domains of `reservation_domains`, the k
        sound UltraServers the gang needs with the most free chips between them (the freest first,
        then id order; the first domain on a tie). None for gangs smaller than one UltraServer
        (they need no UltraServer to drain) and when no domain can ever hold the request.

        The scheduler holds these back from the jobs queued behind the request, so they backfill
        elsewhere instead of nibbling at the chips the large gang waits for.
        """
        best: tuple[int, str, tuple[str, ...]] | None = None
        for name, members in self.reservation_domains(request):
            slots = [self._slots[n] for n in members]
            k = -(-request.chips // slots[0].cpu)
            top = sorted(slots, key=lambda s: (-s.total, s.order))[:k]
            free = sum(s.total for s in top)
            if best is None or free > best[0]:
                best = (free, name, tuple(s.us.name for s in top))
        return None if best is None else best[1:]

    def reservation_domains(self, request: PlacementRequest) -> list[tuple[str, tuple[str, ...]]]:
        """The domains `reservation` chooses among (gangs of at least one UltraServer), each
        with its sound UltraServers only (no failed chip, no cordon: a gang of whole
        UltraServers only ever starts on those, so one with a failed chip is never worth
        holding), and only those with enough of them. The scheduler's EASY pass ranks the same
        candidates by predicted drain time, so whether a gang gets a reservation never depends
        on the predictions, only where."""
        out: list[tuple[str, tuple[str, ...]]] = []
        for name, members in self._domains(request, whole_only=True):
            sound = tuple(n for n in members if self._slots[n].sound)
            if sound and len(sound) >= -(-request.chips // self._slots[sound[0]].cpu):
                out.append((name, sound))
        return out

    def free_by_ultraserver(self, request: PlacementRequest) -> dict[str, int]:
        """Free chips of each schedulable UltraServer that could hold `request` alone (its
        profile, at least its size), in fleet order."""
        slots = sorted(self._slots.values(), key=lambda s: s.order)
        return {s.us.name: s.total for s in slots
                if s.us.schedulable and request.profile in (None, s.us.profile)
                and s.cpu >= request.chips}

    def _domains(self, request: PlacementRequest, *, whole_only: bool
                 ) -> list[tuple[str, tuple[str, ...]]]:
        plans = self._plans
        required = plans.required(request)
        out: list[tuple[str, tuple[str, ...]]] = []
        for pool in self._pools.values():
            if request.profile not in (None, pool.profile) or plans.never(pool, request, required):
                continue
            if whole_only and request.chips < pool.cpu:
                continue
            live = sorted((s for s in pool.slots if s.us.schedulable), key=lambda s: s.order)
            if request.chips <= pool.cpu:
                out += [(s.us.name, (s.us.name,)) for s in live]
                continue
            k = -(-request.chips // pool.cpu)
            deepest = max((len(s.domains) for s in live), default=0)
            last = deepest + 1 if required == CLUSTER else required.network_depth
            for depth in range(1, last + 1):
                groups: dict[tuple[str, ...], list[str]] = {}
                for s in live:
                    key = s.domains[depth - 1] if depth <= len(s.domains) else ("cluster",)
                    groups.setdefault(key, []).append(s.us.name)
                fitting = [("/".join(key), tuple(names)) for key, names in groups.items()
                           if len(names) >= k]
                if fitting:
                    out += fitting
                    break
        return out

    def jobs_in(self, ultraservers: Iterable[str]) -> dict[JobKey, int]:
        """Jobs holding chips on these UltraServers, with how many chips they hold there."""
        held: dict[JobKey, int] = {}
        for name in ultraservers:
            for job, n in self._get(name).jobs.items():
                held[job] = held.get(job, 0) + n
        return held

    def free_chips(self, ultraservers: Iterable[str]) -> int:
        return sum(self._get(n).total for n in ultraservers if self._get(n).us.schedulable)
