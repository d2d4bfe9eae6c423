"""The outbox: status writes decided and not yet sent, and what each job's status says now.

Why an object of its own: three parties put writes here (the cache on a watch event, the cycle
on a decision, the pod data plane on what pods say) and one sends them (`writers`). Before,
each reached into one shared controller's dictionaries; now they go through these few methods,
and the memory of what was written (so a cycle rewrites only what changed) sits beside the
writes that update it. Pure: no API client, no event loop.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from ultraplane.operator.transitions import Transition, reservation_said

from ultraplane.ids import JobKey

# Transitions that free chips another admission may take (written before any admission).
EVICTIONS = frozenset({"preempt", "restart", "fail"})


class Outbox:
    """One queued transition per job (a newer decision replaces an older one), and the
    reasons, queue positions and reservation messages job statuses carry now."""

    def __init__(self) -> None:
        self._queued: dict[JobKey, Transition] = {}
        self.written_positions: dict[JobKey, tuple[str, int | None]] = {}
        self.reserved_messages: dict[JobKey, str] = {}  # Pending messages naming a reservation
        self.reserved: dict[str, JobKey] = {}  # UltraServer -> job held back for (last cycle)

    # -- the queue ---------------------------------------------------------------------
    def put(self, key: JobKey, change: Transition) -> None:
        self._queued[key] = change

    def put_if_absent(self, key: JobKey, change: Transition) -> None:
        self._queued.setdefault(key, change)

    def get(self, key: JobKey) -> Transition | None:
        return self._queued.get(key)

    def discard(self, key: JobKey) -> None:
        self._queued.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._queued

    def __iter__(self) -> Iterator[JobKey]:
        return iter(list(self._queued))

    def __len__(self) -> int:
        return len(self._queued)

    def queued(self) -> Mapping[JobKey, Transition]:
        """A read-only view of what waits (tests, logs)."""
        return dict(self._queued)

    def has_evictions(self) -> bool:
        return any(t.kind in EVICTIONS for t in self._queued.values())

    def take(self, *, pending: bool) -> dict[JobKey, Transition]:
        """Remove and return the queued Pending writes (`pending=True`) or everything else."""
        batch = {k: t for k, t in self._queued.items() if (t.kind == "pending") == pending}
        for key in batch:
            del self._queued[key]
        return batch

    # -- what was written --------------------------------------------------------------
    def forget(self, key: JobKey) -> None:
        """The job is gone: nothing to write, nothing written to compare with."""
        self._queued.pop(key, None)
        self.written_positions.pop(key, None)

    def written(self, key: JobKey, change: Transition) -> None:
        """Remember what a job's status now says, so the next cycle rewrites only changes."""
        if change.kind == "pending":
            self.written_positions[key] = (change.reason, change.position)
        else:
            self.written_positions.pop(key, None)
        said = reservation_said(change.message) if change.kind == "pending" else None
        if said is not None and key in self.reserved.values():
            self.reserved_messages[key] = said
        else:
            self.reserved_messages.pop(key, None)

    def found_written(self, key: JobKey, reason: str, position: int | None,
                      message: str) -> None:
        """What an earlier run wrote on a waiting job still stands (after a restart): compare
        with it rather than rewrite every waiting job at once."""
        self.written_positions[key] = (reason, position)
        said = reservation_said(message)
        if said is not None:  # it was told of a reservation: compare, not rewrite
            self.reserved_messages[key] = said
