"""`POST /v1/placements:dryRun`: where a request would land now, on a live allocator.

Alternatives are found by briefly taking the best placement (under the
backend's lock) and asking again, so they are exactly what the allocator
would pick next, not a second guess at its scoring. Everything taken is
released before returning; the allocator is left as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ultraplane.api.backends import nofit_view, placement_view, request_of
from ultraplane.api.errors import ApiError
from ultraplane.api.schemas import DryRunRequest, DryRunResult, PreemptionView

from ultraplane.allocator import Allocator, NoFit, Placement
from ultraplane.ids import JobKey
from ultraplane.preemption import plan_preemption
from ultraplane.topology import level_problem, parse_level

PROBE = "__dry-run-probe-{}__"


def dry_run(
    allocator: Allocator,
    body: DryRunRequest,
    *,
    running: Mapping[JobKey, int],
    job_name: Callable[[str], str] = str,
    reservation: tuple[Sequence[str], int] | None = None,
) -> DryRunResult:
    """Placement, alternatives and, when nothing fits, the preemption plan at `body.priority`.

    `running` maps preemptible running jobs (allocator keys) to their priority;
    `job_name` turns an allocator key into the name a user knows. `reservation` is the
    scheduler's current backfill reservation, (UltraServers, priority of the job it is for):
    a request that would queue behind that job (priority not above it) is answered without
    those UltraServers, as the scheduler would place it.
    """
    held: Sequence[str] = ()
    if reservation is not None and body.priority <= reservation[1]:
        held = reservation[0]
    with allocator.held_back(held):
        return _dry_run(allocator, body, running=running, job_name=job_name)


def _dry_run(
    allocator: Allocator,
    body: DryRunRequest,
    *,
    running: Mapping[JobKey, int],
    job_name: Callable[[str], str],
) -> DryRunResult:
    request = request_of(body)
    for field, level in (("requiredLevel", request.required_level),
                         ("preferredLevel", request.preferred_level)):
        problem = level_problem(allocator.topology, parse_level(level)) if level else None
        if problem:
            raise ApiError(422, "ValidationError", f"body.{field}", f"body.{field}: {problem}")
    taken: list[JobKey] = []
    alternatives: list[Placement] = []
    try:
        # allocate == place + hold (same search): each probe takes what the allocator would
        # pick, so the next probe shows the next-best choice. All released below.
        try:
            first = allocator.allocate(JobKey(PROBE.format(0)), request)
        except ValueError as exc:  # the core names the problem in a sentence
            raise ApiError(422, "ValidationError", "body", str(exc)) from exc
        if isinstance(first, Placement):
            taken.append(JobKey(PROBE.format(0)))
            for i in range(1, body.alternatives + 1):
                nxt = allocator.allocate(JobKey(PROBE.format(i)), request)
                if isinstance(nxt, NoFit):
                    break
                taken.append(JobKey(PROBE.format(i)))
                alternatives.append(nxt)
    finally:
        for key in taken:
            allocator.release(key)
    if isinstance(first, NoFit):
        result = DryRunResult(fits=False, reason=nofit_view(first))
        if first.kind == "NoCapacity" and any(p < body.priority for p in running.values()):
            plan = plan_preemption(allocator, request, body.priority, running)
            if not isinstance(plan, NoFit):
                victims = sorted({job_name(v) for v in plan.victims})
                result.preemption = PreemptionView(
                    victims=victims, placement=placement_view(plan.placement)
                )
        return result
    return DryRunResult(
        fits=True,
        placement=placement_view(first),
        alternatives=[placement_view(p) for p in alternatives],
    )
