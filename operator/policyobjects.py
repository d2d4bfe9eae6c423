"""Cluster-scoped policy objects of one kind (TenantQueues, PowerBudgets): read and reported.

Why one part for both: queues and budgets are watched, filtered by fleet, read by the core
(a spec the core cannot use is kept aside with the reason), and their statuses written back in
rounds, only when they changed, with an `Active` condition. Only what the core does with them
differs (`queueviews.py`, `budgetviews.py`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from ultraplane.operator.jobviews import FLEET_LABEL
from ultraplane.operator.writers import ApiCalls

__all__ = ["PolicyObjects"]

log = logging.getLogger("ultraplane.operator")

S = TypeVar("S")


class PolicyObjects(Generic[S]):
    """The objects of one kind in this operator's fleet: their specs as the core reads them,
    the ones it cannot use (and why), and what was last written to their statuses."""

    def __init__(self, kind: str, read: Callable[[str, Mapping[str, Any]], S], *,
                 api: ApiCalls, patch: Callable[..., Any], fleet: str | None,
                 clock: Callable[[], datetime], ok: str) -> None:
        self.kind = kind
        self.read = read  # the core's reading of a spec; ValueError: not usable, and why
        self.api, self.patch = api, patch
        self.fleet = fleet
        self.clock = clock
        self.ok = ok  # the Active condition's message while the spec is used
        self.specs: dict[str, S] = {}
        self.invalid: dict[str, str] = {}
        self.generations: dict[str, int | None] = {}
        self.written: dict[str, dict[str, Any]] = {}

    def seen(self, body: Mapping[str, Any], *, deleted: bool = False) -> bool:
        """An object was created, edited or deleted; True when the usable specs changed."""
        labels = (body.get("metadata") or {}).get("labels") or {}
        if self.fleet is not None and labels.get(FLEET_LABEL) != self.fleet:
            return False
        meta = body.get("metadata") or {}
        name = str(meta.get("name") or "")
        if not name:
            return False
        before = self.specs.pop(name, None)
        self.invalid.pop(name, None)
        if deleted:
            self.generations.pop(name, None)
            self.written.pop(name, None)
        else:
            self.generations[name] = meta.get("generation")
            try:
                self.specs[name] = self.read(name, body.get("spec") or {})
            except ValueError as exc:
                self.refuse(name, str(exc))
        return self.specs.get(name) != before

    def refuse(self, name: str, why: str) -> None:
        """Keep `name` out of the core's book; its status says why."""
        self.specs.pop(name, None)
        self.invalid[name] = why
        log.warning("%s %s is not used: %s", self.kind, name, why)

    def conditioned(self, statuses: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """`statuses` (of the usable objects) and the unusable ones', each with its `Active`
        condition."""
        out: dict[str, dict[str, Any]] = {}
        for name in sorted({*statuses, *self.invalid}):
            why = self.invalid.get(name)
            status = dict(statuses.get(name) or {"observedGeneration": self.generations.get(name)})
            status["conditions"] = [{
                "type": "Active", "status": "False" if why else "True",
                "reason": "InvalidSpec" if why else "Ready", "message": why or self.ok}]
            out[name] = status
        return out

    async def write(self, statuses: Mapping[str, dict[str, Any]]) -> None:
        """Write each status that changed since it was last written."""
        stamp = self.clock().astimezone(UTC).isoformat().replace("+00:00", "Z")
        for name, status in statuses.items():
            if self.written.get(name) == status:
                continue
            stamped = {**status, "conditions": [
                {**c, "lastTransitionTime": stamp} for c in status.get("conditions") or []]}
            try:
                await self.api.call(self.patch, name, stamped)
            except Exception as exc:
                log.debug("%s %s status write failed: %s", self.kind, name, exc)
                continue
            self.written[name] = status

    async def rounds(self, flush: Callable[[], Awaitable[None]], seconds: float) -> None:
        """`flush` every `seconds` (a cancelled task stops it; a failed round is retried)."""
        while True:
            await asyncio.sleep(seconds)
            try:
                await flush()
            except Exception as exc:
                log.debug("%s status round failed: %s", self.kind, exc)
