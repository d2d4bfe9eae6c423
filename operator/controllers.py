"""The operator's controller: the small objects of one replica, composed.

Why composition: the controller was one object split across three modules by inheritance, each
re-declaring the others' attributes, and the pod data plane called its private methods. Now
each part is its own object with the state it owns passed in: the cache the watch events update
(`ObservationCache`), the outbox of decided writes (`Outbox`), the writers that send them
(`StatusWriters`), the UltraServer views (`UltraServerViews`) and the admission loop
(`AdmissionLoop`). This module only builds and wires them, and gives the kopf handlers and the
pod data plane the few calls they make. A lease gain builds fresh parts and hands them to the
loop (`take_over`): a new leader trusts the API server, not what it held before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ultraplane.operator.budgetviews import BudgetViews
from ultraplane.operator.inventory import Inventory
from ultraplane.operator.loops import AdmissionLoop, LaunchGate
from ultraplane.operator.observations import ObservationCache
from ultraplane.operator.outboxes import Outbox
from ultraplane.operator.queueviews import QueueViews
from ultraplane.operator.statuses import Write
from ultraplane.operator.ultraserverviews import UltraServerViews
from ultraplane.operator.writers import ApiCalls, Emit, Kube, StatusWriters

from ultraplane.documents.jobstatuses import StatusDecision
from ultraplane.hardware.topology import Topology
from ultraplane.ids import JobKey
from ultraplane.placement.allocator import Allocator
from ultraplane.scheduling.admissions import Admissions
from ultraplane.scheduling.moves import MoveRules
from ultraplane.scheduling.queueorder import DEFAULT_STRETCH, QueueOrder

__all__ = ["Controller", "Kube", "Parts"]


@dataclass(frozen=True)
class Parts:
    """What a replica rebuilds from the API server when it starts or gains the lease."""

    cache: ObservationCache
    outbox: Outbox
    writers: StatusWriters
    views: UltraServerViews


class Controller:
    """One operator replica's admission controller (the leader allocates)."""

    def __init__(self, kube: Kube, *, clock: Callable[[], datetime], emit: Emit,
                 namespaces: list[str] | None = None, fleet: str | None = None,
                 concurrency: int = 16, reservation: bool = True, moves: bool = True,
                 queue_stretch: float = DEFAULT_STRETCH,
                 batch_seconds: float = 0.05, position_seconds: float = 2.0,
                 us_seconds: float = 5.0, resync_seconds: float = 300.0,
                 stats_seconds: float = 30.0, gc_full_seconds: float | None = None) -> None:
        self.clock = clock
        self.emit = emit
        self.namespaces = namespaces
        self.fleet = fleet
        self.concurrency = concurrency
        self.reservation = reservation
        # Moves run only for a tenant queue's job within its unused quota: without queues
        # the rules are on and nothing is ever moved (`ultraplane.scheduling.moves`).
        self.moves = MoveRules(enabled=moves)
        self.queue_stretch = queue_stretch
        self.us_seconds = us_seconds
        self.wake = asyncio.Event()  # kept across lease gains: the loop waits on it
        self.api = ApiCalls(kube, concurrency)  # kept too: its pool and its bound
        self.on_written: Callable[[JobKey], None] | None = None  # the pod data plane's hook
        # kept across lease gains: each new leader's book starts from the queues known
        self.queues = QueueViews(self.api, fleet=fleet, clock=clock, wake=self.wake,
                                 leader=lambda: self.loop.leader, seconds=us_seconds)
        self.budgets = BudgetViews(self.api, fleet=fleet, clock=clock, wake=self.wake,
                                   leader=lambda: self.loop.leader, seconds=us_seconds)
        parts = self.build()
        self.loop = AdmissionLoop(parts.cache, parts.outbox, parts.writers, parts.views,
                                  clock=clock, fleet=fleet, batch_seconds=batch_seconds,
                                  position_seconds=position_seconds,
                                  resync_seconds=resync_seconds, stats_seconds=stats_seconds,
                                  gc_full_seconds=gc_full_seconds)

    def build(self) -> Parts:
        """Fresh parts: an empty cache, allocator and outbox, wired to this replica's wake
        event, API pool and pod data plane."""
        allocator = Allocator(Topology(()))
        admissions = Admissions(allocator, reservation=self.reservation,
                                order=QueueOrder(stretch=self.queue_stretch),
                                quotas=self.queues.book(), power=self.budgets.book(),
                                moves=self.moves)
        self.queues.attach(admissions)
        self.budgets.attach(admissions)
        outbox = Outbox()
        cache = ObservationCache(admissions, Inventory(), outbox, wake=self.wake,
                                 emit=self._post, fleet=self.fleet)
        writers = StatusWriters(self.api, cache, outbox, clock=self.clock, emit=self._post,
                                namespaces=self.namespaces, concurrency=self.concurrency)
        views = UltraServerViews(self.api, cache, outbox, writers, clock=self.clock,
                                 seconds=self.us_seconds)
        writers.on_admitted = views.landed
        writers.on_written = self._written
        return Parts(cache, outbox, writers, views)

    def _post(self, body: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        self.emit(body, type_, reason, message)  # `emit` as set now, not at `build`

    def _written(self, key: JobKey) -> None:
        if self.on_written is not None:
            self.on_written(key)

    # -- the parts in use ------------------------------------------------------------------
    @property
    def cache(self) -> ObservationCache:
        return self.loop.cache

    @property
    def outbox(self) -> Outbox:
        return self.loop.outbox

    @property
    def writers(self) -> StatusWriters:
        return self.loop.writers

    @property
    def views(self) -> UltraServerViews:
        return self.loop.views

    @property
    def admissions(self) -> Admissions:
        return self.loop.cache.admissions

    @property
    def allocator(self) -> Allocator:
        return self.loop.cache.allocator

    @property
    def inventory(self) -> Inventory:
        return self.loop.cache.inventory

    @property
    def bodies(self) -> dict[JobKey, dict[str, Any]]:
        return self.loop.cache.bodies

    @property
    def ready(self) -> bool:
        return self.loop.cache.ready

    @property
    def leader(self) -> bool:
        return self.loop.leader

    @leader.setter
    def leader(self, value: bool) -> None:
        self.loop.leader = value

    @property
    def launches(self) -> LaunchGate | None:
        return self.loop.launches

    @launches.setter
    def launches(self, gate: LaunchGate | None) -> None:
        self.loop.launches = gate

    # -- leadership ------------------------------------------------------------------------
    async def take_over(self) -> None:
        """The lease was gained: fresh parts for the loop, rebuilt from the API server."""
        self.loop.hand_over(*_fields(self.build()))
        self.loop.leader = True

    def step_down(self) -> None:
        """The lease was lost: stop admitting at once."""
        self.loop.leader = False
        self.loop.cache.ready = False

    # -- what the kopf handlers and the pod data plane call ----------------------------------
    async def sync(self) -> None:
        """Rebuild from the API server: the queues first, so that the first cycle already
        admits within them, then the fleet and the jobs."""
        self.queues.load(await self.api.call(self.api.kube.list_tenantqueues, self.fleet),
                         await self.api.call(self.api.kube.list_tenantcohorts, self.fleet))
        await self.loop.sync()
        # budgets after the fleet: their selectors resolve on the UltraServers just listed
        self.budgets.load(await self.api.call(self.api.kube.list_powerbudgets, self.fleet))

    async def run(self) -> None:
        await self.loop.run()

    async def run_cycle(self, *, wait: bool = True) -> None:
        await self.loop.run_cycle(wait=wait)

    async def resync(self) -> None:
        await self.loop.resync()

    def observe_job(self, body: Mapping[str, Any], *, deleted: bool = False,
                    kind: str | None = None) -> None:
        if not deleted:
            self.budgets.describe(body, kind or str(body.get("kind") or "TrainingJob"))
        self.loop.cache.observe_job(body, deleted=deleted, kind=kind)

    def observe_ultraserver(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        self.loop.cache.observe_ultraserver(body, deleted=deleted)
        self.budgets.ultraserver(body, deleted=deleted)

    def observe_budget(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        self.budgets.observe(body, deleted=deleted)

    def observe_queue(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        self.queues.observe(body, deleted=deleted)

    def observe_cohort(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        self.queues.observe_cohort(body, deleted=deleted)

    def forget(self, key: JobKey) -> None:
        self.loop.cache.forget(key)

    def persist(self, key: JobKey, decision: StatusDecision) -> None:
        """Queue the write of what the core decided on a trigger of the pod data plane (pods
        failed, pods that cannot be made)."""
        self.loop.outbox.put(key, decision)

    async def write(self, key: JobKey, change: Write) -> bool:
        """Write one status now (the pod data plane's Running and Succeeded)."""
        return await self.loop.writers.write(key, change)

    async def positions_written(self) -> None:
        await self.loop.writers.positions_written()


def _fields(parts: Parts) -> tuple[ObservationCache, Outbox, StatusWriters, UltraServerViews]:
    return parts.cache, parts.outbox, parts.writers, parts.views
