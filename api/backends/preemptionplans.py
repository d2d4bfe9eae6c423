"""A dry run's preemption plan, searched in a child process with a hard deadline.

Why a process: on a full fleet of small jobs the plan tries thousands of what-if placements
(52 s for 1,152 one-chip jobs on the dev machine). In a thread of the server it would hold
the GIL in 5 ms slices for all that time, and every other tenant's request would queue
behind it even with the fleet lock free. A child process shares nothing: the server keeps
serving at full speed, and at the deadline the child is killed, not asked to stop.

The child gets a pickled copy of the allocator (about 200 KB and 20 ms for 1,152 chips,
taken under the fleet lock), so the live allocator is never touched. Children come from a
`forkserver` whose only preloads are the pure core modules: a fork of the multi-threaded
server itself would copy its locks in whatever state they were.
"""

from __future__ import annotations

import multiprocessing
import pickle
import threading
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

from ultraplane.ids import JobKey
from ultraplane.placement.allocator import Allocator, NoFit, PlacementRequest
from ultraplane.placement.preemption import PreemptionPlan, plan_preemption

PLAN_BUDGET_S = 2.0  # wall seconds one preemption plan may take, its process start included
MAX_PLANNERS = 1  # plans computed at once: each takes a core
_CORE = ["ultraplane.placement.allocator", "ultraplane.placement.preemption", "ultraplane.hardware.topology"]


class PlanTooLong(Exception):
    """The preemption search did not finish within its budget (its process was killed)."""


def snapshot(allocator: Allocator) -> bytes:
    """The allocator as the child will see it (call with the owner's lock held)."""
    return pickle.dumps(allocator, protocol=pickle.HIGHEST_PROTOCOL)


def _plan_in_child(out: Connection, state: bytes, request: PlacementRequest, priority: int,
                   running: dict[JobKey, int], held: tuple[str, ...]) -> None:
    allocator: Allocator = pickle.loads(state)
    with allocator.held_back(held):
        found: Any = plan_preemption(allocator, request, priority, running)
    out.send(found)
    out.close()


class Planners:
    """At most `count` plans at once per backend, each in its own child process."""

    def __init__(self, *, budget_s: float = PLAN_BUDGET_S, count: int = MAX_PLANNERS) -> None:
        self.budget_s = budget_s
        self._slots = threading.BoundedSemaphore(count)
        self._context: Any = None

    def claim(self) -> bool:
        return self._slots.acquire(blocking=False)

    def release(self) -> None:
        self._slots.release()

    def wait_free(self, timeout: float) -> bool:
        """Wait until a planner is free (without claiming it); False after `timeout`."""
        if not self._slots.acquire(timeout=timeout):
            return False
        self._slots.release()
        return True

    def _ctx(self) -> Any:
        if self._context is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(_CORE)
            self._context = ctx
        return self._context

    def plan(self, state: bytes, request: PlacementRequest, priority: int, *,
             running: Mapping[JobKey, int], held: Sequence[str]) -> PreemptionPlan | NoFit:
        """The plan, or PlanTooLong once `budget_s` has passed (the child is then killed)."""
        ctx = self._ctx()
        receive, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_plan_in_child, daemon=True, name="ultraplane-plan",
                            args=(send, state, request, priority, dict(running), tuple(held)))
        try:
            child.start()
            send.close()
            if not receive.poll(self.budget_s):
                raise PlanTooLong
            try:
                found: PreemptionPlan | NoFit = receive.recv()
            except EOFError:  # the child died without an answer (out of memory, killed)
                raise PlanTooLong from None
            return found
        finally:
            receive.close()
            if child.pid is not None:  # started
                if child.is_alive():
                    child.kill()
                child.join(timeout=5)
