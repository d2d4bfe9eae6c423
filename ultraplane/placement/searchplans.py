"""The plan of a request's search: which pools it may use, the level it never crosses, why a
pool can never hold it; then the search itself, and a NoFit that says what would free room.

Why an object apart from the `Allocator` that holds it: a plan depends only on the request and
the inventory, never on usage, so it is cached here until the inventory changes (the allocator
calls `clear`), and this cache and its rules (locality by default, "can never fit") read on their
own. It is held, not inherited: it has state of its own, and the allocator calls it once per
search, never per chip or per slot, so holding it costs no hop on the hot path. It shares the
allocator's pools dict (never a copy) and changes no usage.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from ultraplane.hardware.topology import CLUSTER, ULTRASERVER, Level, parse_level
from ultraplane.ids import JobKey
from ultraplane.placement.placements import NoFit, PlacementRequest
from ultraplane.placement.searches import Held, best_fit, first_fit
from ultraplane.placement.slots import Pool, Slot

__all__ = ["Policy", "SearchPlans"]

Policy = Literal["ultraplane", "first-fit"]


class SearchPlans:
    """Per request (cached until `clear`): the level it never crosses, its candidate pools
    and why each can never hold it; and the search over those pools."""

    def __init__(self, pools: dict[tuple[str, int], Pool], policy: Policy) -> None:
        self.policy = policy
        self._pools = pools  # the allocator's own: pools come and go with its inventory
        self._domain_counts: dict[tuple[int, int], int] = {}
        self._plans: dict[
            PlacementRequest, tuple[Level, Level | None, list[Pool], list[str | None]]] = {}

    def clear(self) -> None:
        """The inventory changed: every plan and domain count may be wrong."""
        self._domain_counts.clear()
        self._plans.clear()

    def search(self, request: PlacementRequest,
                within: Iterable[Slot] | None = None) -> tuple[Level, Held] | NoFit:
        """Where `request` would go now (only on `within`, if given): the level it spans and
        the chips it would hold, from the pool where it spans the tightest level (the first
        such pool on a tie); or why not."""
        plan = self._plans.get(request)
        if plan is None:
            # Levels, candidate pools and "can never fit" depend only on the request and the
            # inventory: cached until the inventory changes.
            if len(self._plans) > 4096:
                self._plans.clear()
            preferred = parse_level(request.preferred_level) if request.preferred_level else None
            pools = [p for p in self._pools.values()
                     if p.slots and request.profile in (None, p.profile)]
            required = self.required(request, pools)
            plan = self._plans[request] = (
                required, preferred, pools, [self.never(p, request, required) for p in pools])
        required, preferred, pools, reasons = plan
        if not pools:
            what = f"{request.profile} " if request.profile else ""
            return NoFit("Unsatisfiable", f"this cluster has no {what}UltraServers")
        if all(reasons):
            return NoFit("Unsatisfiable", str(reasons[0]))
        members = list(within) if within is not None else None
        found: list[tuple[int, int, tuple[Level, Held]]] = []
        for i, (pool, never) in enumerate(zip(pools, reasons, strict=True)):
            if never:
                continue
            mine = None if members is None else [s for s in members if self._pool(s) is pool]
            if self.policy == "first-fit":
                hit = first_fit(pool, request.chips, required, request.whole_servers, mine)
            else:
                hit = best_fit(pool, request.chips, required, preferred,
                               request.whole_servers, mine)
            if hit is not None:
                if len(pools) == 1:
                    return hit
                found.append((hit[0].rank, i, hit))
        if found:
            return min(found, key=lambda f: f[:2])[2]
        pool = next(p for p, never in zip(pools, reasons, strict=True) if not never)
        return self._no_capacity(pool, request, required)

    def required(self, request: PlacementRequest, pools: Iterable[Pool] | None = None) -> Level:
        """The level the search never crosses. Locality by default: a gang that fits in one
        UltraServer (of some pool it may use) stays inside one NeuronSwitch domain unless its
        mode is `Unconstrained`; pools whose UltraServers are too small for it are then
        ruled out by `never`, so it never spans several small UltraServers either."""
        required = parse_level(request.required_level) if request.required_level else CLUSTER
        if request.mode == "Unconstrained" or required <= ULTRASERVER:
            return required
        if pools is None:
            pools = [p for p in self._pools.values()
                     if p.slots and request.profile in (None, p.profile)]
        if request.chips <= max((p.cpu for p in pools), default=0):
            return ULTRASERVER
        return required

    def _domain_count(self, pool: Pool, depth: int) -> int:
        """Most UltraServers of `pool` in one network domain at `depth` (healthy or not)."""
        key = (id(pool), depth)
        if key not in self._domain_counts:
            counts: dict[tuple[str, ...], int] = {}
            for slot in pool.slots:
                d = slot.domains[depth - 1] if depth <= len(slot.domains) else ("cluster",)
                counts[d] = counts.get(d, 0) + 1
            self._domain_counts[key] = max(counts.values(), default=0)
        return self._domain_counts[key]

    def never(self, pool: Pool, request: PlacementRequest, required: Level) -> str | None:
        """Why `pool` can never hold `request` inside `required`, whatever it runs; or None."""
        c, name = request.chips, pool.profile
        if request.whole_servers and c % pool.cps:
            return (f"chips {c} is not a multiple of the {pool.cps} chips per {name} server, "
                    "so whole servers cannot hold it")
        if required <= ULTRASERVER:
            cap = (pool.cps, pool.cpr, pool.cpu)[required.rank]
        elif required == CLUSTER:
            cap = len(pool.slots) * pool.cpu
        else:
            cap = self._domain_count(pool, required.network_depth) * pool.cpu
        if c > cap:
            where = "the whole fleet" if required == CLUSTER else f"one {required.name}"
            return f"chips {c} is more than {where} of {name} UltraServers holds ({cap} chips)"
        return None

    def _no_capacity(self, pool: Pool, request: PlacementRequest, required: Level) -> NoFit:
        c = request.chips
        if c > pool.cpu:
            k = -(-c // pool.cpu)
            most = max(pool.blocks_by_idle, default=0)
            block = next(iter(pool.blocks_by_idle[most])) if most else None
            busy = [s for s in (pool.block_slots[block] if block else ()) if s.indexed and not s.idle]
            where = "network block" if required.rank <= 3 else required.name
            return NoFit("NoCapacity", (
                f"{c} chips need {k} idle {pool.profile} UltraServers inside one {where}; the "
                f"most idle in one block now is {most}; releasing the jobs on the busy "
                "UltraServers of that block would free space"), _jobs_on(busy))
        if pool.us_buckets:
            width = pool.band or (pool.cpu + 1)
            rank = max(pool.us_buckets, key=lambda r: (r % width, -r))
            best = next(iter(pool.us_buckets[rank]))
        else:  # every schedulable UltraServer is full (full ones are not filed): the first
            live = [s for s in pool.slots if s.indexed is not None]
            if not live:
                return NoFit("NoCapacity", f"no {pool.profile} UltraServer is schedulable now")
            best = min(live, key=lambda s: s.order)
        inside = "" if required == CLUSTER else f" inside one {required.name}"
        holders = _jobs_on([best])
        # Name a remedy only where there is one: an UltraServer with no jobs is short of
        # healthy, uncordoned chips, and no release would help.
        remedy = ("releasing its jobs would free space" if holders else
                  "it runs no jobs: the rest of its chips are failed or cordoned")
        return NoFit("NoCapacity", (
            f"no room for {c} chips{inside} on {pool.profile} UltraServers now; the freest, "
            f"{best.us.name}, has {best.total} free chips; {remedy}"
        ), holders)

    def _pool(self, slot: Slot) -> Pool:
        return self._pools[(slot.us.profile, slot.n)]


def _jobs_on(slots: Iterable[Slot]) -> tuple[JobKey, ...]:
    jobs: dict[JobKey, None] = {}
    for slot in slots:
        for job in sorted(slot.jobs, key=lambda j: (-slot.jobs[j], j)):
            jobs[job] = None
    return tuple(jobs)
