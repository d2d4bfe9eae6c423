"""TenantQueues and TenantCohorts: what the operator reads from them and what it writes back.

Why a part of its own: queues are few and change rarely, but every admission depends on them,
so they are kept in memory across lease gains (a new leader's fresh `Admissions` starts with
them, `QuotaBook(...)`) and handed to the core's book whenever one changes. What the core
counts (usage, borrowed chips, admitted and waiting jobs) goes back as each queue's status, in
rounds, and only when it changed. A spec the core cannot honour (one the CRD's validation let
through, or one written before a validation existed) is left out and said in the queue's
`Active` condition. TenantCohorts (nested cohorts, a cohort's own quota) go to the same book;
a cohort whose parent would close a cycle is left out, its condition naming the cycle.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from ultraplane.operator.policyobjects import PolicyObjects
from ultraplane.operator.writers import ApiCalls

from ultraplane.policies.cohortdocuments import cohort_spec
from ultraplane.policies.cohorts import CohortSpec, check_parents
from ultraplane.policies.queuedocuments import queue_spec, queue_statuses
from ultraplane.policies.quotas import QueueSpec, QuotaBook
from ultraplane.scheduling.admissions import Admissions

__all__ = ["QueueViews"]


class QueueViews:
    """The TenantQueues of this operator's fleet, and the writer of their statuses."""

    def __init__(self, api: ApiCalls, *, fleet: str | None, clock: Callable[[], datetime],
                 wake: asyncio.Event, leader: Callable[[], bool] = lambda: True,
                 seconds: float = 5.0) -> None:
        self.objects: PolicyObjects[QueueSpec] = PolicyObjects(
            "TenantQueue", queue_spec, api=api, patch=api.kube.patch_tenantqueue_status,
            fleet=fleet, clock=clock, ok="jobs naming this queue are admitted within its quota")
        self.cohorts: PolicyObjects[CohortSpec] = PolicyObjects(
            "TenantCohort", cohort_spec, api=api, patch=api.kube.patch_tenantcohort_status,
            fleet=fleet, clock=clock, ok="the queues of this cohort borrow and share by it")
        self.leader = leader  # only the leader's counts are true, so only it writes
        self.wake = wake
        self.seconds = seconds
        self.admissions: Admissions | None = None  # the leader's, set by `attach`

    @property
    def specs(self) -> dict[str, QueueSpec]:
        return self.objects.specs

    def book(self) -> QuotaBook:
        """A fresh book of the queues known now (for a new leader's `Admissions`)."""
        return QuotaBook(list(self.specs.values()), list(self.cohorts.specs.values()))

    def attach(self, admissions: Admissions) -> None:
        self.admissions = admissions

    def observe(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        """A TenantQueue was created, edited or deleted: the core's book follows at once."""
        if self.objects.seen(body, deleted=deleted):
            self._changed()

    def observe_cohort(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        """A TenantCohort was created, edited or deleted: the book's tree follows at once,
        unless its parent closes a cycle (then it is left out, and its status says so)."""
        if not self.cohorts.seen(body, deleted=deleted):
            return
        try:
            check_parents(self.cohorts.specs.values())
        except ValueError as exc:
            name = str((body.get("metadata") or {}).get("name") or "")
            self.cohorts.refuse(name, str(exc))
        self._changed()

    def _changed(self) -> None:
        book = self.admissions.quotas if self.admissions is not None else None
        if book is not None:
            book.replace(list(self.specs.values()), list(self.cohorts.specs.values()))
            self.wake.set()  # jobs may fit (or no longer fit) their queues now

    def load(self, bodies: list[dict[str, Any]],
             cohorts: list[dict[str, Any]] | None = None) -> None:
        """Every queue (and cohort) of the fleet, as listed at start-up or on a lease gain."""
        for body in cohorts or ():
            self.observe_cohort(body)
        for body in bodies:
            self.observe(body)

    def statuses(self) -> dict[str, dict[str, Any]]:
        """Each queue's status document as the core counts it now."""
        admissions = self.admissions
        book = admissions.quotas if admissions is not None else None
        if admissions is None or book is None:
            return {}
        counted = queue_statuses(book, admissions.waiting(),
                                 admissions.running().values(),
                                 self.objects.generations, names=self.specs)
        return self.objects.conditioned(counted)

    async def run(self) -> None:
        await self.objects.rounds(self.flush, self.seconds)

    async def flush(self) -> None:
        if self.leader():
            await self.objects.write(self.statuses())
            await self.cohorts.write(self.cohorts.conditioned(
                {name: {} for name in self.cohorts.specs}))
