"""Jobs created at the same time reach the scheduler in the order they were created.

Why: a create takes its sequence number and creation time under the fleet lock, commits its
row without the lock (the 201 follows the commit), and only then queues the job. Creates in
flight finish their commits in any order, but the scheduler's cycle over a deep queue is cheap
only for arrivals behind every job it has already tried (`ultraplane.scheduling.carryovers`): one ranked
ahead of them makes the next cycle a full one, a walk of the whole queue, and with a client
submitting from a few connections that was every cycle, so each submit cost time in the
queue's depth. So a job whose commit finished waits here until every create that took an
earlier number has queued its job or failed; that wait is the length of a concurrent commit.
"""

from __future__ import annotations

from ultraplane.api.backends.embeddedjobs import JobState


class Arrivals:
    """Creates in flight by sequence number, and the jobs whose turn to be queued has come.
    Called with the fleet lock held."""

    def __init__(self) -> None:
        # seq -> the committed job, or None while its create is in flight; in seq order
        # (numbers are taken in increasing order, and a dict keeps the order of its keys)
        self._waiting: dict[int, JobState | None] = {}

    def expect(self, seq: int) -> None:
        """A create took `seq` (the newest number) and is committing its row."""
        self._waiting[seq] = None

    def arrived(self, seq: int, job: JobState | None) -> list[JobState]:
        """The create of `seq` committed `job` (None: it failed, nothing to queue); returns the
        jobs to queue now, in creation order. A `seq` never expected is the newest (a job
        created and committed under one hold of the lock)."""
        if job is None:
            self._waiting.pop(seq, None)
        else:
            self._waiting[seq] = job
        ready: list[JobState] = []
        for waiting in self._waiting.values():
            if waiting is None:  # an earlier create is still committing: the rest wait for it
                break
            ready.append(waiting)
        for done in ready:
            del self._waiting[done.seq]
        return ready

    def __len__(self) -> int:
        return len(self._waiting)
