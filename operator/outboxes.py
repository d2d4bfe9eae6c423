"""The outbox: status writes decided and not yet sent, and what each job's status says now.

Why an object of its own: three parties put the core's decisions here (the cache, for what a
watch event triggered; the cycle; the pod data plane, for what a job's pods triggered) and one
sends them (`writers`), as they are: the decision is what is persisted. Before,
each reached into one shared controller's dictionaries; now they go through these few methods,
and the memory of what was written (so a cycle rewrites only what changed) sits beside the
writes that update it. Pure: no API client, no event loop.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ultraplane.operator.statuses import EVICTIONS, Queued, Write

from ultraplane.documents.jobstatuses import PendingSaid, pending_said
from ultraplane.ids import JobKey
from ultraplane.scheduling.decisions import Pending


class Outbox:
    """One queued decision per job (a newer decision replaces an older one), what waiting
    jobs' statuses say now (`said`, what the rewrite rule compares with), and the
    reservation of the last cycle."""

    def __init__(self) -> None:
        self._queued: dict[JobKey, Queued] = {}
        self.said: dict[JobKey, PendingSaid] = {}  # what each waiting job's status says
        self.reserved: dict[str, JobKey] = {}  # UltraServer -> job held back for (last cycle)

    # -- the queue ---------------------------------------------------------------------
    def put(self, key: JobKey, decision: Queued) -> None:
        self._queued[key] = decision

    def put_if_absent(self, key: JobKey, decision: Queued) -> None:
        self._queued.setdefault(key, decision)

    def get(self, key: JobKey) -> Queued | None:
        return self._queued.get(key)

    def discard(self, key: JobKey) -> None:
        self._queued.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._queued

    def __iter__(self) -> Iterator[JobKey]:
        return iter(list(self._queued))

    def __len__(self) -> int:
        return len(self._queued)

    def queued(self) -> Mapping[JobKey, Queued]:
        """A read-only view of what waits (tests, logs)."""
        return dict(self._queued)

    def has_evictions(self) -> bool:
        return any(isinstance(d, EVICTIONS) for d in self._queued.values())

    def take(self) -> dict[JobKey, Queued]:
        """Remove and return everything queued but the Pending writes (evictions first)."""
        batch: dict[JobKey, Queued] = {
            k: d for k, d in self._queued.items() if not isinstance(d, Pending)}
        for key in batch:
            del self._queued[key]
        return batch

    def take_pending(self) -> dict[JobKey, Pending]:
        """Remove and return the queued Pending writes (queue positions and reasons)."""
        batch = {k: d for k, d in self._queued.items() if isinstance(d, Pending)}
        for key in batch:
            del self._queued[key]
        return batch

    # -- what was written --------------------------------------------------------------
    def forget(self, key: JobKey) -> None:
        """The job is gone: nothing to write, nothing written to compare with."""
        self._queued.pop(key, None)
        self.said.pop(key, None)

    def written(self, key: JobKey, write: Write) -> None:
        """Remember what a job's status now says, so the next cycle rewrites only changes."""
        if isinstance(write, Pending):
            self.said[key] = PendingSaid.of(write.reason, write.position, write.message)
        else:
            self.said.pop(key, None)

    def found_written(self, key: JobKey, status: Mapping[str, Any]) -> None:
        """What an earlier run wrote on a waiting job still stands (after a restart): compare
        with it rather than rewrite every waiting job at once."""
        said = pending_said(status)
        if said is not None:
            self.said[key] = said
