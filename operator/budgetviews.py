"""PowerBudgets: what the operator reads from them and what it writes back.

Why a part of its own, like the queues: budgets are few and change rarely, but every admission
depends on them. They are kept across lease gains (a new leader's `Admissions` gets a
`PowerBook` of them) and handed to the core's book whenever one changes; the book decides
admission within headroom (`NoPower`) and the caps. This part also feeds the book what only an
adapter knows: each job's precision and whether an objective bounds its cap (`describe`), the
UltraServers' labels (for label selectors) and their measured draw (the simulator's telemetry,
`status.powerWatts`). In rounds it writes each budget's status and each job's cap
(`status.powerCapWatts`, `status.cappedSince`), only what changed.

Power-down is a simulator model (`ultraplane simulate --idle-power-down`): the operator never
powers real UltraServers off, so its budgets count every UltraServer as powered.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from ultraplane.operator.jobviews import PLURALS
from ultraplane.operator.policyobjects import PolicyObjects
from ultraplane.operator.writers import ApiCalls

from ultraplane.documents.jobstatuses import power_cap
from ultraplane.ids import JobKey, job_key, parse_job_key
from ultraplane.policies.budgetdocuments import budget_spec, budget_statuses, job_power
from ultraplane.policies.powerbook import PowerBook
from ultraplane.policies.powerbudgets import BudgetConflict, BudgetSpec, validate_budgets
from ultraplane.scheduling.admissions import Admissions

__all__ = ["BudgetViews"]

log = logging.getLogger("ultraplane.operator")


class BudgetViews:
    """The PowerBudgets of this operator's fleet, and the writer of their statuses."""

    def __init__(self, api: ApiCalls, *, fleet: str | None, clock: Callable[[], datetime],
                 wake: asyncio.Event, leader: Callable[[], bool] = lambda: True,
                 seconds: float = 5.0) -> None:
        self.objects: PolicyObjects[BudgetSpec] = PolicyObjects(
            "PowerBudget", budget_spec, api=api, patch=api.kube.patch_powerbudget_status,
            fleet=fleet, clock=clock, ok="jobs are admitted within this budget")
        self.api = api
        self.clock = clock
        self.wake = wake
        self.leader = leader
        self.seconds = seconds
        self.labels: dict[str, dict[str, str]] = {}  # UltraServer -> its labels
        self.watts: dict[str, float] = {}  # UltraServer -> measured draw
        self.caps_written: dict[JobKey, float | None] = {}
        self.admissions: Admissions | None = None

    @property
    def specs(self) -> dict[str, BudgetSpec]:
        return self.objects.specs

    def book(self) -> PowerBook:
        """A fresh book of the budgets known now (for a new leader's `Admissions`)."""
        return PowerBook(list(self.specs.values()))

    def attach(self, admissions: Admissions) -> None:
        self.admissions = admissions
        self.caps_written.clear()

    def _book(self) -> PowerBook | None:
        return self.admissions.power if self.admissions is not None else None

    # -- what the watches saw --------------------------------------------------------------
    def observe(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        """A PowerBudget was created, edited or deleted: the core's book follows at once."""
        if self.objects.seen(body, deleted=deleted):
            self._replace()

    def load(self, bodies: list[dict[str, Any]]) -> None:
        for body in bodies:
            self.observe(body)

    def ultraserver(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        """An UltraServer changed: its labels (label selectors) and its measured draw."""
        meta = body.get("metadata") or {}
        name = str(meta.get("name") or "")
        if deleted:
            self.labels.pop(name, None)
            self.watts.pop(name, None)
        else:
            labels = dict(meta.get("labels") or {})
            moved = self.labels.get(name) != labels
            self.labels[name] = labels
            watts = (body.get("status") or {}).get("powerWatts")
            if isinstance(watts, int | float) and not isinstance(watts, bool):
                self.watts[name] = float(watts)
            if not moved:
                return
        book = self._book()
        if book is not None and book.active:
            try:
                book.refleet(self.labels)
            except ValueError as exc:  # a parent no longer covers a child's UltraServers
                log.warning("power budgets not resolved on the fleet: %s", exc)

    def describe(self, body: Mapping[str, Any], kind: str) -> None:
        """What the book predicts a job's draw with (`budgetdocuments.job_power`)."""
        book = self._book()
        if book is None:
            return
        meta = body.get("metadata") or {}
        book.describe(job_key(kind, str(meta.get("namespace")), str(meta.get("name"))),
                      job_power(kind, body.get("spec") or {}))

    def _replace(self) -> None:
        book = self._book()
        if book is None:
            return
        while True:  # budgets that do not nest on this fleet are left out, with the reason
            try:
                validate_budgets(list(self.specs.values()), self.admissions.allocator.topology
                                 if self.admissions is not None else None, self.labels)
                break
            except BudgetConflict as exc:
                self.objects.refuse(exc.budget, str(exc))
        book.replace(list(self.specs.values()), self.labels)
        self.wake.set()

    # -- statuses ------------------------------------------------------------------------
    def statuses(self) -> dict[str, dict[str, Any]]:
        book = self._book()
        if book is None:
            return {}
        return self.objects.conditioned(budget_statuses(book, self.objects.generations))

    async def run(self) -> None:
        """Measure, cap and write, every `seconds` (a cancelled task stops it)."""
        await self.objects.rounds(self.flush, self.seconds)

    async def flush(self) -> None:
        book = self._book()
        if not self.leader() or book is None or not (book.active or self.objects.invalid):
            return
        now = self.clock()
        if self.watts:
            book.measure(self.watts)
        caps = book.caps(now.timestamp()) if book.active else {}
        await self._write_caps(book, caps, now)
        await self.objects.write(self.statuses())

    async def _write_caps(self, book: PowerBook, caps: Mapping[JobKey, float | None],
                          now: datetime) -> None:
        """Each running job's cap, when it changed (`jobstatuses.power_cap`: removed when the
        cap is lifted)."""
        for key, cap in caps.items():
            status = power_cap(cap, book.capped_for(key, now.timestamp()), now)
            if self.caps_written.get(key) == status["powerCapWatts"]:  # (None: never capped)
                continue
            kind, namespace, name = parse_job_key(key)
            try:
                await self.api.call(self.api.kube.patch_job_status, PLURALS[kind], namespace,
                                    name, status, "")
            except Exception as exc:
                log.debug("cap of %s not written: %s", key, exc)
                continue
            self.caps_written[key] = status["powerCapWatts"]
        for gone in [k for k, cap in self.caps_written.items() if k not in caps or cap is None]:
            del self.caps_written[gone]
