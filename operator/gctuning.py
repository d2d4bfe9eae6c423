"""The operator's heap and CPython's cyclic collector: keep full collections out of the cycle.

Nearly everything the operator holds lives as long as a job or the process: the job bodies
the watch delivers, the allocator's indexes, kopf's caches. CPython's collector walks all of
them on each full (generation 2) collection, and it runs one whenever the long-lived heap grew
by a quarter since the last; a stream of status updates (every new body replaces an old one)
makes that every few seconds. On a 1M-chip fleet with 20,000 jobs one such pass takes 0.1 to
0.3 s, and it lands inside whichever admission cycle allocated the object that tripped it.

`HeapKeeper.settle()`, called after each cycle, moves every object alive at that moment into
the permanent generation (`gc.freeze()`, a constant-time list splice). Reference counting still
frees a frozen object as soon as nothing refers to it; only garbage *cycles* among frozen
objects wait, until the next deliberate full collection (`gc.unfreeze()`, `gc.collect()`, then
freeze again) every `full_seconds`, which bounds the memory such cycles can hold. Collections
of young objects (allocated since the last cycle) still run as usual and stay short.

`GcPauses` (a `gc.callbacks` hook) records each collection's pause, so the periodic cycle
summary says how much of a slow cycle was the collector.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

log = logging.getLogger("ultraplane.operator")
DEFAULT_FULL_SECONDS = 600.0


class GcPauses:
    """Pauses of the cyclic collector since the last `take()` (installed in `gc.callbacks`)."""

    def __init__(self) -> None:
        self._began: float | None = None
        self.pauses: list[float] = []

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        elif self._began is not None:
            self.pauses.append(time.perf_counter() - self._began)
            self._began = None

    def take(self) -> list[float]:
        pauses, self.pauses = self.pauses, []
        return pauses

    def install(self) -> None:
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def uninstall(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)


PAUSES = GcPauses()  # the process's one hook (the operator's loop installs it)


class HeapKeeper:
    """Freezes the heap after each cycle; a full collection every `full_seconds` (None:
    never freeze, CPython's own schedule)."""

    def __init__(self, full_seconds: float | None = DEFAULT_FULL_SECONDS) -> None:
        self.full_seconds = full_seconds
        self._last_full: float | None = None
        self.full_collections = 0

    def settle(self, now: float) -> None:
        """After a cycle (`now`: a monotonic clock)."""
        if self.full_seconds is None:
            return
        if self._last_full is not None and now - self._last_full < self.full_seconds:
            gc.freeze()
            return
        self._last_full = now
        began = time.perf_counter()
        gc.unfreeze()
        found = gc.collect()
        gc.freeze()
        self.full_collections += 1
        log.info("full collection: %d unreachable objects freed in %.3fs; %d objects frozen",
                 found, time.perf_counter() - began, gc.get_freeze_count())

    def release(self) -> None:
        """Hand the heap back to CPython's schedule (a controller that stops)."""
        if self.full_seconds is not None:
            gc.unfreeze()
