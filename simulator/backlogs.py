"""The replay's backlog: jobs waiting *outside* the Scheduler until their size could fit.

Why: `Scheduler.cycle()` tries every queued job against the allocator, which is
right for the operator (tens of waiting jobs) but quadratic for a replay of a
saturated fleet with thousands waiting (each release would retry them all). The
replay therefore hands the Scheduler only the jobs whose size fits in the chips
free right now, in queue order (priority, then rank: `ultraplane.scheduling.queueorder`), the way Slurm's backfill bounds
the jobs it tests. A job fed but not placed (fragmentation, a required level)
stays in the Scheduler's queue and is retried there; admission decisions stay the
Scheduler's and the allocator's.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from ultraplane.workloads import QueuedJob


class Backlog:
    """Waiting jobs bucketed by (priority, chips), in (rank, seq) order inside a bucket."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[int, int, bool], list[tuple[float, int, str, QueuedJob]]] = {}
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def add(self, job: QueuedJob) -> None:
        bucket = self._buckets.setdefault(
            (job.priority, job.request.chips, job.request.may_split), [])
        heapq.heappush(bucket, (job.rank, job.seq, job.key, job))
        self._n += 1

    def sizes(self) -> Iterator[int]:
        return (size for (_, size, _), b in self._buckets.items() if b)

    def take(self, free: int, *, hole: int | None = None, whole: int = 0) -> list[QueuedJob]:
        """Pop, in queue order, every job that fits in the `free` chips left;
        with `hole`, a job of at most `whole` chips (one UltraServer) that may not be split
        must also fit in the biggest free hole of one UltraServer."""
        out: list[QueuedJob] = []
        while (job := self._pop(0, free, hole, whole)) is not None:
            free -= job.request.chips
            out.append(job)
        return out

    def pop_first(self, min_chips: int) -> QueuedJob | None:
        """Pop the first job, in queue order, of at least `min_chips` chips."""
        return self._pop(min_chips, None)

    def _pop(self, low: int, high: int | None, hole: int | None = None,
             whole: int = 0) -> QueuedJob | None:
        """Pop the first job, in queue order, of `low` to `high` chips."""
        best: tuple[int, float, int, tuple[int, int, bool]] | None = None
        for key, bucket in self._buckets.items():
            prio, size, may_split = key
            if (bucket and low <= size and (high is None or size <= high)
                    and (hole is None or may_split or size > whole or size <= hole)
                    and (best is None or (-prio, bucket[0][0], bucket[0][1]) < best[:3])):
                best = (-prio, bucket[0][0], bucket[0][1], key)
        if best is None:
            return None
        job = heapq.heappop(self._buckets[best[3]])[3]
        self._n -= 1
        return job
