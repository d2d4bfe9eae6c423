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
from datetime import UTC, datetime
from typing import Any

from ultraplane.operator.jobviews import FLEET_LABEL, PLURALS
from ultraplane.operator.writers import ApiCalls

from ultraplane.admissions import Admissions
from ultraplane.budgetspecs import InvalidBudgetError, budget_spec, budget_statuses, job_power
from ultraplane.ids import JobKey, job_key
from ultraplane.powerbook import PowerBook
from ultraplane.powerbudgets import BudgetSpec, validate_budgets

__all__ = ["BudgetViews"]

log = logging.getLogger("ultraplane.operator")


class BudgetViews:
    """The PowerBudgets of this operator's fleet, and the writer of their statuses."""

    def __init__(self, api: ApiCalls, *, fleet: str | None, clock: Callable[[], datetime],
                 wake: asyncio.Event, leader: Callable[[], bool] = lambda: True,
                 seconds: float = 5.0) -> None:
        self.api = api
        self.fleet = fleet
        self.clock = clock
        self.wake = wake
        self.leader = leader
        self.seconds = seconds
        self.specs: dict[str, BudgetSpec] = {}
        self.invalid: dict[str, str] = {}  # budget -> why it is not used
        self.generations: dict[str, int | None] = {}
        self.labels: dict[str, dict[str, str]] = {}  # UltraServer -> its labels
        self.watts: dict[str, float] = {}  # UltraServer -> measured draw
        self.written: dict[str, dict[str, Any]] = {}
        self.caps_written: dict[JobKey, float | None] = {}
        self.admissions: Admissions | None = None

    def book(self) -> PowerBook:
        """A fresh book of the budgets known now (for a new leader's `Admissions`)."""
        return PowerBook(list(self.specs.values()))

    def attach(self, admissions: Admissions) -> None:
        self.admissions = admissions
        self.caps_written.clear()

    def _book(self) -> PowerBook | None:
        return self.admissions.power if self.admissions is not None else None

    def mine(self, body: Mapping[str, Any]) -> bool:
        labels = (body.get("metadata") or {}).get("labels") or {}
        return self.fleet is None or labels.get(FLEET_LABEL) == self.fleet

    # -- what the watches saw --------------------------------------------------------------
    def observe(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        """A PowerBudget was created, edited or deleted: the core's book follows at once."""
        if not self.mine(body):
            return
        meta = body.get("metadata") or {}
        name = str(meta.get("name") or "")
        if not name:
            return
        self.specs.pop(name, None)
        self.invalid.pop(name, None)
        if deleted:
            self.generations.pop(name, None)
            self.written.pop(name, None)
        else:
            self.generations[name] = meta.get("generation")
            try:
                self.specs[name] = budget_spec(name, body.get("spec") or {})
            except InvalidBudgetError as exc:
                self.invalid[name] = str(exc)
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
        """What the book predicts a job's draw with (`budgetspecs.job_power`)."""
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
        specs = dict(self.specs)
        while True:
            try:
                validate_budgets(list(specs.values()), self.admissions.allocator.topology
                                 if self.admissions is not None else None, self.labels)
                break
            except ValueError as exc:  # leave out the budget the sentence names, say why
                culprit = next((n for n in specs if f"power budget {n} " in f"{exc} "
                                or f"power budget {n}:" in str(exc)), None)
                if culprit is None:
                    culprit = sorted(specs)[-1]
                self.invalid[culprit] = str(exc)
                specs.pop(culprit)
        book.replace(list(specs.values()), self.labels)
        self.wake.set()

    # -- statuses ------------------------------------------------------------------------
    def statuses(self) -> dict[str, dict[str, Any]]:
        book = self._book()
        if book is None:
            return {}
        out = budget_statuses(book, self.generations)
        for name in list(out) + sorted(self.invalid):
            why = self.invalid.get(name)
            status = out.setdefault(name, {"observedGeneration": self.generations.get(name)})
            status["conditions"] = [{
                "type": "Active", "status": "False" if why else "True",
                "reason": "InvalidSpec" if why else "Ready",
                "message": why or "jobs are admitted within this budget"}]
        return out

    async def run(self) -> None:
        """Measure, cap and write, every `seconds` (a cancelled task stops it)."""
        while True:
            await asyncio.sleep(self.seconds)
            try:
                await self.flush()
            except Exception as exc:  # the next round tries again
                log.debug("PowerBudget round failed: %s", exc)

    async def flush(self) -> None:
        book = self._book()
        if not self.leader() or book is None or not (book.active or self.invalid):
            return
        now = self.clock()
        if self.watts:
            book.measure(self.watts)
        caps = book.caps(now.timestamp()) if book.active else {}
        await self._write_caps(book, caps, now)
        stamp = now.astimezone(UTC).isoformat().replace("+00:00", "Z")
        for name, status in self.statuses().items():
            if self.written.get(name) == status:
                continue
            stamped = {**status, "conditions": [
                {**c, "lastTransitionTime": stamp} for c in status["conditions"]]}
            try:
                await self.api.call(self.api.kube.patch_powerbudget_status, name, stamped)
            except Exception as exc:
                log.debug("PowerBudget %s status write failed: %s", name, exc)
                continue
            self.written[name] = status

    async def _write_caps(self, book: PowerBook, caps: Mapping[JobKey, float | None],
                          now: datetime) -> None:
        """Each running job's cap, when it changed: `powerCapWatts` and `cappedSince` (both
        removed when the cap is lifted)."""
        for key, cap in caps.items():
            cap = None if cap is None else round(cap, 1)
            if self.caps_written.get(key) == cap:  # (None: never capped, or lifted already)
                continue
            kind, namespace, name = _parts(key)
            since = None
            if cap is not None:
                held = book.capped_for(key, now.timestamp())
                began = now.timestamp() - (held or 0.0)
                since = datetime.fromtimestamp(began, UTC).isoformat().replace("+00:00", "Z")
            status = {"powerCapWatts": cap, "cappedSince": since}
            try:
                await self.api.call(self.api.kube.patch_job_status, PLURALS[kind], namespace,
                                    name, status, "")
            except Exception as exc:
                log.debug("cap of %s not written: %s", key, exc)
                continue
            if cap is None:
                self.caps_written.pop(key, None)
            else:
                self.caps_written[key] = cap
        for gone in set(self.caps_written) - set(caps):
            del self.caps_written[gone]


def _parts(key: JobKey) -> tuple[str, str, str]:
    prefix, namespace, name = key.split("#", 1)[0].split("/", 2)
    return ("InferenceJob" if prefix == "ij" else "TrainingJob"), namespace, name
