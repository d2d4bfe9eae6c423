"""Move planning: the cheapest set of running jobs to move so that one domain fits a request.

Why a search of its own, beside preemption planning (`ultraplane.placement.preemption`): a
preemption sends its victims back to the queue, so any set that frees the domain will do and
the fewest victims win. A move keeps its jobs running: each one must be placed again at once,
outside the chips the request takes (on free chips, or on chips an earlier move of the same
plan freed), and each costs what it loses (its work since its last checkpoint and a restart).
So the search ranks the candidate sets of each domain by their cost, checks the cheapest
whose chips suffice with a what-if placement, and only then executes the plan for real,
undoing it when a moved job finds no place. The domains are searched cheapest bound first
and a domain whose cheapest set costs more than the best plan found is never searched.

Ties: the lowest total cost, then the fewest moves, then the domain order (deterministic).
The allocator is left exactly as it was unless a plan is returned; then the request holds
its chips under `key` and each moved job holds its new ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import combinations

from ultraplane.ids import JobKey
from ultraplane.placement.allocator import Allocator, NoFit, Placement
from ultraplane.placement.placements import PlacementRequest
from ultraplane.placement.preemption import plan_preemption

__all__ = ["Movable", "MovePlan", "plan_moves"]

_WIDEST = 3  # moves one plan may make: more is rarely cheap and the sets grow fast
_NEAREST = 12  # cheapest candidates of a domain the exact search combines
_CHECKS = 24  # what-if placements tried per domain
_TRIES = 6  # plans executed (and undone when a moved job finds no place) per request


@dataclass(frozen=True)
class Movable:
    """A running job a plan may take off its chips: what it holds (its request), what that
    costs, whether it may be moved (placed again at once) and whether it may be evicted
    instead when it finds no place (`evict`: a borrower its lender reclaims; it waits
    again)."""

    request: PlacementRequest
    cost: float
    evict: bool = False
    move: bool = True


@dataclass(frozen=True)
class MovePlan:
    """`placement` holds the request's chips; `moves` are (job, its old placement, its new
    one), in the order they were placed; `evicted` the borrowers released for it (in the
    domain, or where a moved job went); `cost` is their total."""

    placement: Placement
    moves: tuple[tuple[JobKey, Placement, Placement], ...]
    evicted: tuple[JobKey, ...]
    cost: float


def plan_moves(allocator: Allocator, key: JobKey, request: PlacementRequest,
               candidates: Mapping[JobKey, Movable]) -> MovePlan | None:
    """Execute the cheapest plan that places `request` under `key` by moving (or evicting)
    some of `candidates` (the cheapest sets of at most `_WIDEST` jobs of a domain, else a greedy
    set), or change nothing and return None. A plan moves at least one job: evictions alone are reclaim's (`preemption`)."""
    held = allocator.allocations()
    domains = allocator.preemption_domains(request)
    ranked: list[tuple[float, int, int, tuple[JobKey, ...]]] = []
    for order, (_, names) in enumerate(domains):
        here = allocator.jobs_in(names)
        free = allocator.free_chips(names)
        movable = [j for j in here if j in candidates and j in held]
        cands = sorted(movable, key=lambda j: (candidates[j].cost, j))[:_NEAREST]
        sets = []
        for size in range(1, min(_WIDEST, len(cands)) + 1):
            for combo in combinations(cands, size):
                if free + sum(here[j] for j in combo) >= request.chips:
                    sets.append((sum(candidates[j].cost for j in combo), size, combo))
        sets.sort(key=lambda s: (s[0], s[1]))
        found = next(((cost, size, combo) for cost, size, combo in sets[:_CHECKS]
                      if isinstance(allocator.place_without(request, combo, names), Placement)),
                     None)
        if found is None:  # many small jobs: more than `_WIDEST` moves, chosen greedily
            found = _greedy(allocator, request, names, movable, candidates)
        if found is not None:
            ranked.append((found[0], found[1], order, found[2]))
    ranked.sort(key=lambda r: r[:3])
    for cost, _, order, combo in ranked[:_TRIES]:
        plan = _execute(allocator, key, request, domains[order][1], combo, cost, candidates)
        if plan is not None:
            return plan
    return None


def _greedy(allocator: Allocator, request: PlacementRequest, names: tuple[str, ...],
            movable: list[JobKey], candidates: Mapping[JobKey, Movable]
            ) -> tuple[float, int, tuple[JobKey, ...]] | None:
    """Take jobs, cheapest per chip first, until the request fits; then drop, most costly
    first, any it fits without."""
    held = allocator.allocations()
    order = sorted(movable, key=lambda j: (candidates[j].cost / max(held[j].chips, 1), j))
    freed = allocator.free_chips(names)
    here = allocator.jobs_in(names)
    chosen: list[JobKey] = []
    for j in order:
        chosen.append(j)
        freed += here[j]
        if freed >= request.chips and isinstance(
                allocator.place_without(request, chosen, names), Placement):
            break
    else:
        return None
    for j in sorted(chosen, key=lambda j: (-candidates[j].cost, j)):
        trial = [c for c in chosen if c != j]
        if trial and isinstance(allocator.place_without(request, trial, names), Placement):
            chosen = trial
    return (sum(candidates[j].cost for j in chosen), len(chosen), tuple(chosen))


def _evict_for(allocator: Allocator, request: PlacementRequest,
               candidates: Mapping[JobKey, Movable], released: list[JobKey]) -> Placement | None:
    """Where a moved job goes when no chips are free: one domain freed by evicting borrowers
    (cheapest first), which are released and noted in `released`; None when none frees."""
    held = allocator.allocations()
    ranked = sorted((v for v in candidates if candidates[v].evict and v not in released
                     and v in held), key=lambda v: (candidates[v].cost, v))
    pool = {v: i for i, v in enumerate(ranked)}
    plan = plan_preemption(allocator, request, len(pool), pool, in_order=True)
    if isinstance(plan, NoFit):
        return None
    for v in plan.victims:
        allocator.release(v)
        released.append(v)
    return plan.placement


def _execute(allocator: Allocator, key: JobKey, request: PlacementRequest,
             names: tuple[str, ...], combo: tuple[JobKey, ...], cost: float,
             candidates: Mapping[JobKey, Movable]) -> MovePlan | None:
    """Release `combo`, place the request inside `names`, then each moved job anywhere else
    (largest first), evicting borrowers outside the domain for it when no chips are free:
    the plan, or everything put back and None."""
    everyone = allocator.allocations()
    old = {j: everyone[j] for j in candidates if j in everyone}
    requests = {j: candidates[j].request for j in candidates}
    released: list[JobKey] = list(combo)
    for j in combo:
        allocator.release(j)
    target = allocator.place_without(request, (), names)
    placed: list[tuple[JobKey, Placement, Placement]] = []
    # a borrower in the domain is moved too when there is room for it, and evicted if not
    movers = sorted(combo, key=lambda j: (-old[j].chips, j))
    if isinstance(target, Placement):
        target = allocator.assign(key, target.chip_ids, request)
        for j in movers:
            new = (allocator.allocate(j, requests[j]) if candidates[j].move
                   else NoFit("NoCapacity", "not movable"))
            if isinstance(new, NoFit) and candidates[j].evict:
                continue  # evicted: it waits again
            if isinstance(new, NoFit):
                room = _evict_for(allocator, requests[j], candidates, released)
                if room is None:
                    break
                new = allocator.assign(j, room.chip_ids, requests[j])
            placed.append((j, old[j], new))
        else:
            cost += sum(candidates[v].cost for v in released if v not in combo)
            evicted = tuple(j for j in released if j not in {p[0] for p in placed})
            # never reclaim more than the request it serves (reclaim's own footprint)
            if placed and sum(old[j].chips for j in evicted) <= request.chips:
                return MovePlan(target, tuple(placed), evicted, cost)
        allocator.release(key)
    for j, _, _ in placed:
        allocator.release(j)
    for j in released:  # every chip taken above was given back: no conflict is possible
        allocator.assign(j, old[j].chip_ids, requests[j])
    return None
