"""The embedded fleet's heap and CPython's cyclic collector: full collections kept out of requests.

Why: every job the backend holds is a dozen long-lived objects (its state, its reading by the
core, its queue entry and decision), and CPython walks all of them in each full (generation 2)
collection, which it runs whenever the long-lived heap grew by a quarter since the last. A
stream of submits grows it steadily, so with thousands of jobs queued a pause of 0.1 to 0.25 s
(at 2,000 to 10,000 jobs on the 2-core dev machine) landed every few seconds in whichever
request allocated the object that tripped it, and made the submits' p99.

The operator met the same (operator/gctuning.py, whose policy this is; one adapter does not
import another): after each tick the heap is frozen (`gc.freeze()`, a constant-time list
splice), so collections see only what was allocated since. Reference counting still frees a
frozen object as soon as nothing refers to it; only garbage cycles among frozen objects wait,
for the full collection made every `FULL_SECONDS` (unfreeze, collect, freeze again), which
bounds the memory they can hold. `release()` hands the heap back to CPython's schedule.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable

log = logging.getLogger("ultraplane.api.embedded")
FULL_SECONDS = 600.0


class Heap:
    """Freezes the heap after each tick; collects it in full every `full_seconds`."""

    def __init__(self, full_seconds: float = FULL_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.full_seconds = full_seconds
        self.clock = clock
        self._last_full: float | None = None  # the app collected and froze at start-up

    def settle(self) -> None:
        """After a tick of the background loop."""
        now = self.clock()
        if self._last_full is None:
            self._last_full = now
        if now - self._last_full < self.full_seconds:
            gc.freeze()
            return
        self._last_full = now
        began = time.perf_counter()
        gc.unfreeze()
        found = gc.collect()
        gc.freeze()
        log.debug("full collection: %d unreachable objects freed in %.3fs", found,
                  time.perf_counter() - began)

    def release(self) -> None:
        """The loop stopped: CPython's own schedule again."""
        gc.unfreeze()
