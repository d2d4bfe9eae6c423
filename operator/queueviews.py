"""TenantQueues: what the operator reads from them and what it writes back.

Why a part of its own: queues are few and change rarely, but every admission depends on them,
so they are kept in memory across lease gains (a new leader's fresh `Admissions` starts with
them, `QuotaBook(...)`) and handed to the core's book whenever one changes. What the core
counts (usage, borrowed chips, admitted and waiting jobs) goes back as each queue's status, in
rounds, and only when it changed. A spec the core cannot honour (one the CRD's validation let
through, or one written before a validation existed) is left out and said in the queue's
`Active` condition.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from ultraplane.operator.jobviews import FLEET_LABEL
from ultraplane.operator.writers import ApiCalls

from ultraplane.admissions import Admissions
from ultraplane.queuespecs import InvalidQueueError, queue_spec, queue_statuses
from ultraplane.quotas import QueueSpec, QuotaBook

__all__ = ["QueueViews"]

log = logging.getLogger("ultraplane.operator")


class QueueViews:
    """The TenantQueues of this operator's fleet, and the writer of their statuses."""

    def __init__(self, api: ApiCalls, *, fleet: str | None, clock: Callable[[], datetime],
                 wake: asyncio.Event, leader: Callable[[], bool] = lambda: True,
                 seconds: float = 5.0) -> None:
        self.api = api
        self.leader = leader  # only the leader's counts are true, so only it writes
        self.fleet = fleet
        self.clock = clock
        self.wake = wake
        self.seconds = seconds
        self.specs: dict[str, QueueSpec] = {}
        self.invalid: dict[str, str] = {}  # queue -> why its spec is not used
        self.generations: dict[str, int | None] = {}
        self.written: dict[str, dict[str, Any]] = {}
        self.admissions: Admissions | None = None  # the leader's, set by `attach`

    def book(self) -> QuotaBook:
        """A fresh book of the queues known now (for a new leader's `Admissions`)."""
        return QuotaBook(list(self.specs.values()))

    def attach(self, admissions: Admissions) -> None:
        self.admissions = admissions

    def mine(self, body: Mapping[str, Any]) -> bool:
        labels = (body.get("metadata") or {}).get("labels") or {}
        return self.fleet is None or labels.get(FLEET_LABEL) == self.fleet

    def observe(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        """A TenantQueue was created, edited or deleted: the core's book follows at once."""
        if not self.mine(body):
            return
        meta = body.get("metadata") or {}
        name = str(meta.get("name") or "")
        if not name:
            return
        before = self.specs.get(name)
        self.specs.pop(name, None)
        self.invalid.pop(name, None)
        if deleted:
            self.generations.pop(name, None)
            self.written.pop(name, None)
        else:
            self.generations[name] = meta.get("generation")
            try:
                self.specs[name] = queue_spec(name, body.get("spec") or {})
            except InvalidQueueError as exc:
                self.invalid[name] = str(exc)
                log.warning("TenantQueue %s is not used: %s", name, exc)
        if self.specs.get(name) != before:
            self._replace()

    def load(self, bodies: list[dict[str, Any]]) -> None:
        """Every queue of the fleet, as listed at start-up or on a lease gain."""
        for body in bodies:
            self.observe(body)

    def _replace(self) -> None:
        book = self.admissions.quotas if self.admissions is not None else None
        if book is not None:
            book.replace(list(self.specs.values()))
            self.wake.set()  # jobs may fit (or no longer fit) their queues now

    # -- statuses ------------------------------------------------------------------------
    def statuses(self) -> dict[str, dict[str, Any]]:
        """Each queue's status document as the core counts it now."""
        admissions = self.admissions
        book = admissions.quotas if admissions is not None else None
        if admissions is None or book is None:
            return {}
        statuses = queue_statuses(book, admissions.scheduler.queued(),
                                  admissions.scheduler.running().values(), self.generations,
                                  names={*self.specs, *self.invalid})
        out: dict[str, dict[str, Any]] = {}
        for name, status in statuses.items():
            why = self.invalid.get(name)
            status["conditions"] = [{
                "type": "Active", "status": "False" if why else "True",
                "reason": "InvalidSpec" if why else "Ready",
                "message": why or "jobs naming this queue are admitted within its quota"}]
            out[name] = status
        return out

    async def run(self) -> None:
        """Write the statuses that changed, every `seconds` (a cancelled task stops it)."""
        while True:
            await asyncio.sleep(self.seconds)
            try:
                await self.flush()
            except Exception as exc:  # the next round tries again
                log.debug("TenantQueue status round failed: %s", exc)

    async def flush(self) -> None:
        if not self.leader():
            return
        now = self.clock().isoformat().replace("+00:00", "Z")
        for name, status in self.statuses().items():
            if self.written.get(name) == status:
                continue
            stamped = {**status, "conditions": [
                {**c, "lastTransitionTime": now} for c in status["conditions"]]}
            try:
                await self.api.call(self.api.kube.patch_tenantqueue_status, name, stamped)
            except Exception as exc:
                log.debug("TenantQueue %s status write failed: %s", name, exc)
                continue
            self.written[name] = status
