"""Preemption planning: the fewest lower-priority victims that make one domain fit a request.

Why one domain: the common complaint about Kueue and Volcano preemption is that they evict a
scattered set of jobs whose chips, together, are "enough", and the preemptor still cannot be
placed because no single server / rack / UltraServer / block got enough room. Here every
candidate domain (an UltraServer for gangs up to one UltraServer, a network domain of whole
UltraServers for larger ones) is tried on its own: its strictly-lower-priority jobs are the only
candidates, and a set is accepted only if the allocator, with those jobs released, really places
the request inside that domain. Among domains the plan with the fewest victims wins, then the
fewest victim chips, then the lowest victim priority, then the domain order (deterministic).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import combinations

from ultraplane.ids import JobKey
from ultraplane.placement.allocator import Allocator, NoFit, Placement, PlacementRequest

__all__ = ["PreemptionPlan", "plan_preemption"]

_EXACT_BUDGET = 200  # what-if placements tried per domain before falling back to greedy


@dataclass(frozen=True)
class PreemptionPlan:
    """Evict `victims` (possibly none), then `placement` fits."""

    victims: tuple[JobKey, ...]
    placement: Placement


def plan_preemption(
    allocator: Allocator, request: PlacementRequest, priority: int, running: Mapping[JobKey, int],
    *, in_order: bool = False,
) -> PreemptionPlan | NoFit:
    """`in_order`: `running`'s values rank the victims best first (tenant reclaim, see
    `ultraplane.policies.quotas`); each domain takes them greedily in that order, then drops the ones
    not needed, instead of searching for the fewest (cheap when borrowers are many small jobs)."""
    now = allocator.place(request)
    if isinstance(now, Placement):
        return PreemptionPlan((), now)
    if now.kind == "Unsatisfiable":
        return now
    held = allocator.allocations()
    best: tuple[tuple[int, int, int, int, int], PreemptionPlan] | None = None
    for order, (_, names) in enumerate(allocator.preemption_domains(request)):
        here = allocator.jobs_in(names)
        cands = [j for j in here if j in running and running[j] < priority and j in held]
        freeable = allocator.free_chips(names) + sum(here[j] for j in cands)
        if not cands or freeable < request.chips:
            continue
        # Most chips freed here first, then lowest priority: the greedy order and a cut-off.
        if in_order:
            cands.sort(key=lambda j: (running[j], j))
            plan = _greedy(allocator, request, names, cands)
        else:
            cands.sort(key=lambda j: (-here[j], running[j], j))
            plan = _plan_in(allocator, request, names, cands)
        if plan is None:
            continue
        chips = sum(held[v].chips for v in plan.victims)
        prios = [running[v] for v in plan.victims]
        key = (len(plan.victims), chips, max(prios), sum(prios), order)
        if best is None or key < best[0]:
            best = (key, plan)
    if best is None:
        return NoFit("NoCapacity", (
            f"no single domain can fit {request.chips} chips even after evicting every job of "
            f"priority below {priority}; {now.message}"), now.blocking)
    return best[1]


def _plan_in(allocator: Allocator, request: PlacementRequest, names: tuple[str, ...],
             cands: list[JobKey]) -> PreemptionPlan | None:
    everything = allocator.place_without(request, cands, names)
    if isinstance(everything, NoFit):
        return None
    tries = 0
    for size in range(1, len(cands) + 1):
        found: PreemptionPlan | None = None
        for combo in combinations(cands, size):
            tries += 1
            if tries > _EXACT_BUDGET:
                return _greedy(allocator, request, names, cands)
            placed = allocator.place_without(request, combo, names)
            if isinstance(placed, Placement):
                found = PreemptionPlan(tuple(sorted(combo)), placed)
                break  # combos come in greedy order: the first hit frees the most chips
        if found is not None:
            return _cheapest(allocator, request, names, cands, size, found)
    return None


def _cheapest(allocator: Allocator, request: PlacementRequest, names: tuple[str, ...],
              cands: list[JobKey], size: int, first: PreemptionPlan) -> PreemptionPlan:
    """Among sets of `size` victims, the one with the fewest chips (bounded search)."""
    held = allocator.allocations()
    best, best_chips = first, sum(held[v].chips for v in first.victims)
    by_chips = sorted(cands, key=lambda j: (held[j].chips, j))
    for tries, combo in enumerate(combinations(by_chips, size)):
        if tries >= _EXACT_BUDGET:
            break
        chips = sum(held[v].chips for v in combo)
        if chips >= best_chips:
            continue
        placed = allocator.place_without(request, combo, names)
        if isinstance(placed, Placement):
            best, best_chips = PreemptionPlan(tuple(sorted(combo)), placed), chips
    return best


def _greedy(allocator: Allocator, request: PlacementRequest, names: tuple[str, ...],
            cands: list[JobKey]) -> PreemptionPlan | None:
    """Add victims (most chips here first) until it fits, then drop any that are not needed."""
    chosen: list[JobKey] = []
    placed: Placement | NoFit = NoFit("NoCapacity", "")
    here = allocator.jobs_in(names)
    freed = allocator.free_chips(names)
    for job in cands:
        chosen.append(job)
        freed += here.get(job, 0)
        if freed < request.chips:  # cannot fit yet: spare the what-if placement
            continue
        placed = allocator.place_without(request, chosen, names)
        if isinstance(placed, Placement):
            break
    if not isinstance(placed, Placement):
        return None
    for job in sorted(chosen, key=lambda j: j):
        trial = [j for j in chosen if j != job]
        again = allocator.place_without(request, trial, names) if trial else allocator.place(request)
        if isinstance(again, Placement):
            chosen, placed = trial, again
    return PreemptionPlan(tuple(sorted(chosen)), placed)
