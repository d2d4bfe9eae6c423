"""`POST /v1/placements:dryRun`: where a request would land now, on a live allocator.

Alternatives are found by briefly taking the best placement (under the
backend's lock) and asking again, so they are exactly what the allocator
would pick next, not a second guess at its scoring. Everything taken is
released before returning; the allocator is left as it was.

The preemption plan is the expensive part (on a full fleet of small jobs it tries thousands
of what-if placements). It is first tried on the live allocator under the lock for at most
INLINE_BUDGET_S (most plans take a few milliseconds); past that, `pending` copies what it
needs under the lock, and `preempt` searches that copy after the lock is released, in a
child process with a deadline (`ultraplane.api.backends.preemptionplans`). A plan that would
take longer is a 503 with Retry-After, and only a few plans run at once, so one tenant's
worst-case request cannot stall the fleet's ticks or the other tenants' requests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from ultraplane.api.backends import nofit_view, placement_view, request_of
from ultraplane.api.backends.preemptionplans import Planners, PlanTooLong, snapshot
from ultraplane.api.errors import ApiError
from ultraplane.api.schemas import DryRunRequest, DryRunResult, PreemptionView

from ultraplane.hardware.topology import level_problem, parse_level
from ultraplane.ids import JobKey
from ultraplane.placement.allocator import Allocator, NoFit, Placement, PlacementRequest
from ultraplane.placement.preemption import PreemptionPlan, plan_preemption

PROBE = "__dry-run-probe-{}__"
RETRY_AFTER_S = 5
INLINE_BUDGET_S = 0.02  # a plan tried on the live allocator first, under the lock, this long
INLINE_MAX_CANDIDATES = 64  # ... when it has at most this many possible victims
SHARED_PLANNERS = Planners()  # for callers that bring none (the Kubernetes backend)


def busy(message: str) -> ApiError:
    return ApiError(503, "Unavailable", None, message,
                    headers={"Retry-After": str(RETRY_AFTER_S)})


@dataclass
class PendingPlan:
    """A dry run that did not fit and may fit by preemption: what the plan needs, copied."""

    state: bytes  # the allocator, pickled under the lock
    running: dict[JobKey, int]
    held: tuple[str, ...]


def _held(body: DryRunRequest, reservation: tuple[Sequence[str], int] | None) -> tuple[str, ...]:
    if reservation is not None and body.priority <= reservation[1]:
        return tuple(reservation[0])
    return ()


def place(allocator: Allocator, body: DryRunRequest, *,
          reservation: tuple[Sequence[str], int] | None = None) -> DryRunResult:
    """Placement and alternatives, or why nothing fits (no preemption plan): fast, under lock.

    `reservation` is the scheduler's current backfill reservation, (UltraServers, priority of
    the job it is for): a request that would queue behind that job (priority not above it)
    is answered without those UltraServers, as the scheduler would place it.
    """
    with allocator.held_back(_held(body, reservation)):
        return _place(allocator, body)


def needs_plan(result: DryRunResult, body: DryRunRequest, running: Mapping[JobKey, int]) -> bool:
    return (result.reason is not None and result.reason.kind == "NoCapacity"
            and any(p < body.priority for p in running.values()))


class _Bounded:
    """A live allocator whose what-if searches stop at a deadline (PlanTooLong).

    A delegating view rather than a copy, for the quick first attempt: `plan_preemption`
    makes every search through `place` or `place_without`, where the deadline is checked
    before the search starts, so the allocator is never left half changed.
    """

    def __init__(self, allocator: Allocator, deadline: float) -> None:
        self._allocator = allocator
        self._deadline = deadline

    def __getattr__(self, name: str) -> Any:
        return getattr(self._allocator, name)

    def _check(self) -> None:
        if time.monotonic() > self._deadline:
            raise PlanTooLong

    def place(self, request: PlacementRequest) -> Placement | NoFit:
        self._check()
        return self._allocator.place(request)

    def place_without(self, request: PlacementRequest, victims: Iterable[JobKey],
                      within: Iterable[str]) -> Placement | NoFit:
        self._check()
        return self._allocator.place_without(request, victims, within)


def plan_inline(allocator: Allocator, body: DryRunRequest, *, running: Mapping[JobKey, int],
                reservation: tuple[Sequence[str], int] | None) -> PreemptionPlan | NoFit | None:
    """The plan if it takes under INLINE_BUDGET_S on the live allocator (call under the
    owner's lock), else None: most plans are that quick, and need no child process. With
    more than INLINE_MAX_CANDIDATES possible victims it is not tried (it would only spend
    its whole budget holding the lock)."""
    if sum(1 for p in running.values() if p < body.priority) > INLINE_MAX_CANDIDATES:
        return None
    bounded = cast(Allocator, _Bounded(allocator, time.monotonic() + INLINE_BUDGET_S))
    try:
        with allocator.held_back(_held(body, reservation)):
            return plan_preemption(bounded, request_of(body), body.priority, running)
    except PlanTooLong:
        return None


def with_plan(result: DryRunResult, found: PreemptionPlan | NoFit,
              job_name: Callable[[str], str]) -> DryRunResult:
    if not isinstance(found, NoFit):
        victims = sorted({job_name(v) for v in found.victims})
        result.preemption = PreemptionView(victims=victims,
                                           placement=placement_view(found.placement))
    return result


def pending(allocator: Allocator, body: DryRunRequest, *, running: Mapping[JobKey, int],
            reservation: tuple[Sequence[str], int] | None, planners: Planners) -> PendingPlan:
    """Copy what a plan needs (call under the owner's lock, with a planner slot claimed)."""
    return PendingPlan(snapshot(allocator), dict(running), _held(body, reservation))


def preempt(result: DryRunResult, body: DryRunRequest, plan: PendingPlan, *,
            job_name: Callable[[str], str], planners: Planners) -> DryRunResult:
    """Add the preemption plan to `result`, searched in a child process (no lock needed)."""
    try:
        found = planners.plan(plan.state, request_of(body), body.priority,
                              running=plan.running, held=plan.held)
    except PlanTooLong:
        raise busy(f"the preemption plan for {body.chips} chips at priority {body.priority} "
                   f"takes longer than {planners.budget_s:g} s on this fleet now; ask again "
                   f"later or with fewer chips") from None
    return with_plan(result, found, job_name)


def dry_run(
    allocator: Allocator,
    body: DryRunRequest,
    *,
    running: Mapping[JobKey, int],
    job_name: Callable[[str], str] = str,
    reservation: tuple[Sequence[str], int] | None = None,
    planners: Planners | None = None,
) -> DryRunResult:
    """Placement, alternatives and, when nothing fits, the preemption plan at `body.priority`.

    All in one call (the caller holds its lock throughout); the plan still runs on a copy,
    with its deadline. `running` maps preemptible running jobs (allocator keys) to their
    priority; `job_name` turns an allocator key into the name a user knows.
    """
    result = place(allocator, body, reservation=reservation)
    if not needs_plan(result, body, running):
        return result
    quick = plan_inline(allocator, body, running=running, reservation=reservation)
    if quick is not None:
        return with_plan(result, quick, job_name)
    planners = planners or SHARED_PLANNERS
    if not planners.claim():
        raise busy("another preemption plan is being computed; ask again shortly")
    try:
        plan = pending(allocator, body, running=running, reservation=reservation,
                       planners=planners)
        return preempt(result, body, plan, job_name=job_name, planners=planners)
    finally:
        planners.release()


def _place(allocator: Allocator, body: DryRunRequest) -> DryRunResult:
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
        return DryRunResult(fits=False, reason=nofit_view(first))
    return DryRunResult(
        fits=True,
        placement=placement_view(first),
        alternatives=[placement_view(p) for p in alternatives],
    )
