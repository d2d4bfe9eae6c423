"""The discrete-event engine: one heap of (time, priority, seq, event) and one clock.

Why this shape (SimPy's): the heap orders events by time, then by a small
priority so that, at one instant, releases happen before admissions (a job
ending at t frees chips for a job submitted at t), then by insertion order so
that two runs with the same seed pop events in the same order. The engine owns
simulated time; nothing here reads a wall clock, and the random source is a
seeded `random.Random` handed to whoever needs randomness.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

# Priorities at one instant: lower runs first.
END = 0  # a job finishes and releases chips
FAULT = 1  # a chip or server fails
SUBMIT = 2  # a job enters the queue
TICK = 3  # sampling and bookkeeping


@dataclass(frozen=True, slots=True)
class Event:
    kind: str
    payload: Any = None


class Engine:
    """A heap of timed events and the simulated clock they advance."""

    __slots__ = ("_cancelled", "_heap", "_seq", "now", "processed", "rng")

    def __init__(self, *, start: float = 0.0, seed: int = 0) -> None:
        self.now = start
        self.rng = random.Random(seed)
        self.processed = 0
        self._heap: list[tuple[float, int, int, Event]] = []
        self._seq = 0
        self._cancelled: set[int] = set()

    def schedule(self, at: float, priority: int, event: Event) -> int:
        """Queue `event` at simulated time `at`; returns a token to cancel it."""
        if at < self.now:
            raise ValueError(f"cannot schedule an event at {at} before now ({self.now})")
        self._seq += 1
        heapq.heappush(self._heap, (at, priority, self._seq, event))
        return self._seq

    def cancel(self, token: int) -> None:
        """Forget a scheduled event (lazy: it is skipped when popped)."""
        self._cancelled.add(token)

    def __len__(self) -> int:
        return len(self._heap) - len(self._cancelled)

    def peek_time(self) -> float | None:
        while self._heap and self._heap[0][2] in self._cancelled:
            self._cancelled.discard(heapq.heappop(self._heap)[2])
        return self._heap[0][0] if self._heap else None

    def pop_instant(self) -> list[tuple[int, Event]]:
        """Pop every live event at the next instant, in (priority, seq) order."""
        t = self.peek_time()
        if t is None:
            return []
        self.now = t
        out: list[tuple[int, Event]] = []
        heap, cancelled = self._heap, self._cancelled
        while heap and heap[0][0] == t:
            _, prio, seq, ev = heapq.heappop(heap)
            if seq in cancelled:
                cancelled.discard(seq)
                continue
            out.append((prio, ev))
        self.processed += len(out)
        return out

    def run(self, handle: Callable[[Event], None], *, until: float | None = None) -> None:
        """Pop and handle events in order until the heap is empty (or `until`)."""
        for _, ev in self.events(until=until):
            handle(ev)

    def events(self, *, until: float | None = None) -> Iterator[tuple[int, Event]]:
        while True:
            t = self.peek_time()
            if t is None or (until is not None and t > until):
                if until is not None:
                    self.now = max(self.now, until)
                return
            yield from self.pop_instant()
