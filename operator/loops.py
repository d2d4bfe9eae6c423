"""The admission loop: watch events update a cache, one loop runs the driver and writes status.

The controller is three layers, each a module: `observations` (the cache the watch events
update), this module (the cycle: what the driver's decisions mean for the outbox) with
`transitions` (what each decision writes), and `writers` (the only code that calls the API).

Why one loop and not a cycle per event: 5,000 jobs created at once must not cost 5,000 cycles.
Handlers only record what they saw (`observe_*`) and wake the loop; the loop waits a short batch
window, runs one `Scheduler.cycle()` over everything that changed, and persists the outcome with
a bounded number of concurrent writes.

Why the write order matters (kill -9 safety): chips count as taken after a restart only if a job's
status says so, so evictions (preempted, restarted, failed) are written *before* the admissions
that reuse their chips, and a chip is never in two persisted allocations. An admission that was
not persisted is simply redone after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from ultraplane.operator.gctuning import PAUSES, HeapKeeper
from ultraplane.operator.inventory import Inventory
from ultraplane.operator.jobviews import expected_end, view_job
from ultraplane.operator.transitions import Transition, moved, reservation_said
from ultraplane.operator.writers import Kube, Writers

from ultraplane.admissions import Admissions, Pending
from ultraplane.allocator import Allocator
from ultraplane.ids import JobKey
from ultraplane.queueorder import DEFAULT_STRETCH, QueueOrder
from ultraplane.scheduling import QueuedJob
from ultraplane.topology import Topology

__all__ = ["Controller", "CycleStats", "Kube", "LaunchGate", "Transition", "moved"]

log = logging.getLogger("ultraplane.operator")
STARTUP_RESYNCS = (3.0, 15.0)  # seconds after a (re)start: see Controller.sync
RESYNC_RETRY_SECONDS = 10.0  # after a resync's list failed
HOLD_POLL_SECONDS = 0.2  # how often held admissions look at the launch backlog again
# Transitions that free chips another admission may take (written before any admission).
EVICTIONS = frozenset({"preempt", "restart", "fail"})
Emit = Callable[[Mapping[str, Any], str, str, str], None]


class LaunchGate(Protocol):
    """The pod data plane's launch backlog, as the admission loop asks it (`PodPlane`)."""

    def held(self) -> str | None:
        """Why admission cycles wait now, or None."""

    def budget(self) -> int | None:
        """Pods the next cycle's admissions may launch (None: no limit)."""

    def owe(self, key: JobKey, pods: int) -> None:
        """`key` was admitted; its admission will launch `pods` pods."""


@dataclass
class CycleStats:
    """Cycle durations, logged at INFO once per `every` seconds: the scheduling decision alone
    and the whole cycle with its writes (what an operator at fleet scale watches)."""

    every: float = 30.0
    decide: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)
    since: float | None = None

    def add(self, decide: float, total: float, now: float) -> None:
        if self.since is None:
            self.since = now
            log.info("first admission cycle: decided in %.3fs, written in %.3fs", decide, total)
        self.decide.append(decide)
        self.total.append(total)
        if now - self.since >= self.every:
            pauses = PAUSES.take()
            log.info("admission cycles: %d in %.0fs; decide p50 %.4fs p99 %.4fs; with writes "
                     "p50 %.4fs p99 %.4fs; collector %d pauses, max %.4fs, total %.4fs",
                     len(self.total), now - self.since,
                     quantile(self.decide, 0.5), quantile(self.decide, 0.99),
                     quantile(self.total, 0.5), quantile(self.total, 0.99),
                     len(pauses), max(pauses, default=0.0), sum(pauses))
            self.decide, self.total, self.since = [], [], now


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


class Controller(Writers):
    """Owns the allocator and scheduler of one operator replica (the leader): the cache
    (`observations`), the cycle (here) and the writers (`writers`)."""

    def __init__(self, kube: Kube, *, clock: Callable[[], datetime], emit: Emit,
                 namespaces: list[str] | None = None, fleet: str | None = None,
                 concurrency: int = 16, reservation: bool = True,
                 queue_stretch: float = DEFAULT_STRETCH,
                 batch_seconds: float = 0.05, position_seconds: float = 2.0,
                 us_seconds: float = 5.0, resync_seconds: float = 300.0,
                 stats_seconds: float = 30.0, gc_full_seconds: float | None = None) -> None:
        self.kube = kube
        self.clock = clock
        self.emit = emit
        self.namespaces = namespaces
        self.fleet = fleet
        self.concurrency = concurrency
        self.batch_seconds = batch_seconds
        self.position_seconds = position_seconds
        self.inventory = Inventory()
        self.allocator = Allocator(Topology(()))
        self.admissions = Admissions(self.allocator, reservation=reservation,
                                     order=QueueOrder(stretch=queue_stretch))
        self.scheduler = self.admissions.scheduler
        self.bodies: dict[JobKey, dict[str, Any]] = {}
        self.outbox: dict[JobKey, Transition] = {}
        self.unfinalize: set[JobKey] = set()  # deleting jobs still carrying our old finalizer
        self.ghosts: set[str] = set()
        self.written_positions: dict[JobKey, tuple[str, int | None]] = {}
        self.reserved_messages: dict[JobKey, str] = {}  # Pending messages naming a reservation
        self.written_us: dict[str, dict[str, Any]] = {}
        self.reserved: dict[str, JobKey] = {}  # UltraServer -> job held back for (last cycle)
        self.buffered: dict[JobKey, tuple[dict[str, Any], bool]] = {}
        self.removing: dict[JobKey, dict[str, Any]] = {}
        self.submitted: dict[JobKey, QueuedJob] = {}
        self.ready = False
        self.leader = True
        self.wake = asyncio.Event()
        self.cycles = 0
        self.cycle_stats = CycleStats(every=stats_seconds)
        self.heap = HeapKeeper(gc_full_seconds)  # see operator/gctuning.py; None: CPython's own
        self.positions_due: dict[JobKey, Transition] = {}
        self._position_heap: list[tuple[int, int, JobKey, Transition]] = []
        self._position_seq = itertools.count()
        self._position_writers: list[asyncio.Task[None]] = []
        self._ultraservers: asyncio.Task[None] | None = None
        self._admitting: dict[JobKey, asyncio.Task[None]] = {}  # admission writes in flight
        # position writes may take an eighth of the writers: admissions keep the rest
        self._position_width = max(1, concurrency // 8)
        self.on_written: Callable[[JobKey], None] | None = None  # after each status write
        self.launches: LaunchGate | None = None  # the pod data plane's launch backlog
        self.held_seconds = 0.0  # time cycles were held for it, in total
        self._held_since: float | None = None  # the hold under way began (loop time)
        self._last_positions = 0.0
        self._last_us = float("-inf")
        self.us_seconds = us_seconds
        self.us_settle_seconds = us_seconds / 5  # see Writers.flush_ultraservers
        self.us_max_seconds = 3 * us_seconds
        self._us_gap = 0.0  # after the last round: us_seconds if it wrote, else the settle time
        self._us_timer: asyncio.TimerHandle | None = None
        self._us_touched: dict[str, float] = {}  # UltraServer -> when an admission last landed
        self._us_dirty: dict[str, float] = {}  # UltraServer -> since when its view is behind
        self.resync_seconds = resync_seconds
        self._last_resync = 0.0
        self._resync_due = False
        self._resyncing: asyncio.Task[None] | None = None  # the resync in flight, if any
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="kube")
        self._limit = asyncio.Semaphore(concurrency)

    # -- startup / recovery ------------------------------------------------------------
    async def sync(self) -> None:
        """Rebuild state from the API server: allocations live in job status, not in memory."""
        servers = await self.list_fleet()
        jobs = await self.list_all_jobs()
        for body in servers:
            self.observe_ultraserver(body, settle=False)
            # What an earlier run wrote still stands: rewrite a view only when it changes (a
            # restart would otherwise rewrite every UltraServer of the fleet at once).
            written = dict(body.get("status") or {})
            if written:
                written.pop("heartbeatTime", None)
                written.setdefault("reservedFor", None)
                self.written_us[str(body["metadata"]["name"])] = written
        # Jobs holding chips first, so a waiting job never takes a chip that is already theirs.
        jobs.sort(key=lambda b: (b.get("status") or {}).get("phase") not in ("Admitted", "Running"))
        self.ready = True
        for body in jobs:
            self.observe_job(body)
        for body, deleted in list(self.buffered.values()):
            self.observe_job(body, deleted=deleted)
        self.buffered.clear()
        for entry_name in self.inventory.names():
            self.enforce_health(entry_name, full=True)
        log.info("recovered %d UltraServers, %d jobs (%d holding chips)", len(servers),
                 len(jobs), len(self.scheduler.running()))
        # Our list and kopf's watch are two reads: a job deleted between them is in the first
        # and never reaches the watch (no finalizer holds it). Two early resyncs close that gap.
        loop = asyncio.get_running_loop()
        for delay in STARTUP_RESYNCS:
            loop.call_later(delay, self._ask_resync)
        self.wake.set()

    def _ask_resync(self) -> None:
        self._resync_due = True
        self.wake.set()

    # -- the loop ----------------------------------------------------------------------
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._last_resync = loop.time()
        PAUSES.install()
        try:
            while True:
                # No event for a while: resync anyway. `asyncio.timeout`, not `wait_for`: on
                # Python 3.11 a cancel that lands as the wake comes is lost inside `wait_for`
                # (the loop then never stops; a unit test hung on it in CI).
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.resync_seconds):
                        await self.wake.wait()
                self.wake.clear()
                await asyncio.sleep(self.batch_seconds)
                if not (self.ready and self.leader):
                    continue
                try:
                    if (self._resync_due
                            or loop.time() - self._last_resync >= self.resync_seconds) \
                            and (self._resyncing is None or self._resyncing.done()):
                        self._last_resync, self._resync_due = loop.time(), False
                        self._resyncing = asyncio.create_task(self._resync_aside())
                    if await self._hold_for_launches():
                        continue
                    await self.run_cycle(wait=False)
                    self.heap.settle(loop.time())
                except Exception:  # one bad cycle must not stop admission for good
                    log.exception("admission cycle failed; retrying")
                    await asyncio.sleep(1.0)
                    self.wake.set()
        finally:
            if self._resyncing is not None:
                self._resyncing.cancel()

    async def _hold_for_launches(self) -> bool:
        """Whether this cycle waits for the pod data plane's launch backlog (`PodPlane.held`):
        it then looks again shortly. An eviction never waits (a failed pod's policy, a
        preemption), and neither does a cycle when nothing would be admitted."""
        why = self.launches.held() if self.launches is not None else None
        if why is None or any(t.kind in EVICTIONS for t in self.outbox.values()) \
                or not self.scheduler.queued_count():
            if self._held_since is not None:
                log.info("admissions resumed after %.1f s held for pod launches",
                         asyncio.get_running_loop().time() - self._held_since)
                self._held_since = None
            return False
        if self._held_since is None:
            self._held_since = asyncio.get_running_loop().time()
            log.info("admissions held: %s", why)
        await asyncio.sleep(HOLD_POLL_SECONDS)
        self.held_seconds += HOLD_POLL_SECONDS
        self.wake.set()
        return True

    async def _resync_aside(self) -> None:
        """A resync beside the cycles, not in front of them: listing thousands of jobs takes
        the API server seconds (1.4 s for 2,500 in a burst of creates), and the cycles it held
        back made the p99 of create -> Admitted. What it finds is forgotten like a DELETED
        event, which may arrive between any two steps of a cycle too."""
        try:
            await self.resync()
        except Exception as exc:  # the next one comes at the interval, or sooner on request
            log.warning("resync failed: %s; retrying in %.0f s", exc, RESYNC_RETRY_SECONDS)
            asyncio.get_running_loop().call_later(RESYNC_RETRY_SECONDS, self._ask_resync)

    async def resync(self) -> None:
        """Forget jobs deleted while their DELETED event was missed (a watch gap).

        Jobs carry no finalizer of ours, so a deletion is seen on the watch or here: a job known
        before the list started and absent from it (or present with another uid) is gone. A job
        first seen during the list is left alone, since the list may predate it."""
        known = {key: body["metadata"].get("uid") for key, body in self.bodies.items()}
        listed = await self.list_all_jobs()
        present = {view_job(b).key: b["metadata"].get("uid") for b in listed}
        gone = [k for k, uid in known.items()
                if present.get(k) != uid and (self.bodies.get(k) or {}).get(
                    "metadata", {}).get("uid") == uid]
        for key in gone:
            self.forget(key)
        if gone:
            log.info("resync: %d deleted job(s) released their chips", len(gone))
            self.wake.set()  # their chips are free for the next cycle

    async def run_cycle(self, *, wait: bool = True) -> None:
        """One cycle: decide, write evictions, then start the admission writes.

        The loop passes `wait=False`: admission writes stream in the background (head of the
        queue first, `concurrency` in flight) while the next cycle decides on what arrived
        meanwhile, so a job created during a big cycle's writes is not held until they all
        land. Tests pass `wait=True` (the default) to see every write of the cycle done."""
        self.cycles += 1
        loop = asyncio.get_running_loop()
        started = loop.time()
        # Predicted ends of running jobs (from their progress) and the clock turn on the
        # core's EASY backfilling and split-when-it-pays decisions.
        clock = self.clock()
        for key in self.scheduler.running():
            body = self.bodies.get(key)
            if body is not None:
                self.admissions.expect_end(key, expected_end(body.get("status") or {}, clock))
        budget = self.launches.budget() if self.launches is not None else None
        decisions = self.admissions.cycle(now=clock.timestamp(), launch_budget=budget)
        decided = loop.time()
        self.reserved = decisions.held_for()
        for victim in decisions.preempted:
            self.outbox[victim.key] = Transition(
                "preempt", "Preempted",
                f"Preempted by higher-priority job {victim.by}; requeued.")
        for failed in decisions.failed:
            self.outbox[failed.key] = Transition("fail", failed.reason, failed.message)
        now = loop.time()
        refresh = now - self._last_positions >= self.position_seconds
        if refresh:
            self._last_positions = now
        stale = False
        for waiting in decisions.pending:
            stale |= self._pending(waiting, refresh)
        if stale:  # positions moved; write them once the refresh interval has passed
            loop.call_later(self.position_seconds, self.wake.set)
        admissions = {a.key: Transition("admit", "Admitted", a.message, a.placements)
                      for a in decisions.admitted}
        if decisions.deferred:  # the launch budget was spent: look again once pods are created
            loop.call_later(HOLD_POLL_SECONDS, self.wake.set)
        if self.launches is not None:  # the pod plane counts their pods from now on
            for a in decisions.admitted:
                queued = self.submitted.get(a.key)
                if queued is not None and queued.launches:
                    self.launches.owe(a.key, sum(len(p.servers) for p in a.placements))
        for key in admissions.keys() | self.outbox.keys():  # a queued position is stale now
            if key in admissions or self.outbox[key].kind != "pending":
                self.positions_due.pop(key, None)
        self._collect_ghosts()
        if any(t.kind in EVICTIONS for t in self.outbox.values()):
            # An eviction may free chips an earlier cycle's admission still being written
            # holds, or evict that very job: the admissions in flight land first, then the
            # evictions, then the admissions that reuse the chips (the kill -9 order).
            await self.admissions_written()
        await self.flush()  # evictions first: an admission may take a victim's chips
        self.start_admissions(admissions)
        if wait:
            await self.admissions_written()
        self.start_positions()
        self.start_ultraservers()
        if wait:
            await self.ultraservers_written()
        log.debug("cycle %d: %d admitted, %d preempted, %d pending in %.3fs", self.cycles,
                  len(admissions), len(decisions.preempted), len(decisions.pending),
                  loop.time() - started)
        self.cycle_stats.add(decided - started, loop.time() - started, loop.time())

    def start_admissions(self, batch: Mapping[JobKey, Transition]) -> None:
        """Write admissions in the background, in queue order (the semaphore is FIFO)."""
        for key, change in batch.items():
            self._admitting[key] = asyncio.create_task(self._admit(key, change))

    async def _admit(self, key: JobKey, change: Transition) -> None:
        try:
            done = await self._write(key, change)
        except Exception:  # never leave an admission unaccounted for
            log.exception("admission write for %s failed", key)
            done = False
        finally:
            self._admitting.pop(key, None)
        if done:  # its UltraServers' figures just moved: their view waits for them to settle
            now = asyncio.get_running_loop().time()
            for placement in change.placements:
                for us in placement.ultraservers:
                    self._us_touched[us] = now
        if not done and self.scheduler.is_running(key):
            self.scheduler.requeue(key)  # not persisted: its chips are free, decide again
            self.wake.set()
        if not self._admitting:  # drained: the UltraServer view may now include them
            self.wake.set()

    async def admissions_written(self) -> None:
        """Wait until every admission write started so far has landed (or given up)."""
        while self._admitting:
            await asyncio.gather(*list(self._admitting.values()), return_exceptions=True)

    def start_ultraservers(self) -> None:
        """One round of UltraServer status writes at a time, in the background: a view, so
        it never holds back admissions. Rounds are `us_seconds` apart after one that wrote
        (so an UltraServer is written at most once per interval) and `us_settle_seconds`
        after one that only put writes off (see `Writers.flush_ultraservers`); a round that
        is not due yet is asked for once, by a timer."""
        loop = asyncio.get_running_loop()
        wait = self._last_us + self._us_gap - loop.time()
        if wait > 0:
            if self._us_timer is None or self._us_timer.when() <= loop.time():
                self._us_timer = loop.call_later(wait, self.wake.set)
            return
        if self._ultraservers is None or self._ultraservers.done():
            self._last_us = loop.time()
            self._ultraservers = asyncio.create_task(self.flush_ultraservers())

    async def ultraservers_written(self) -> None:
        if self._ultraservers is not None:
            await self._ultraservers

    def _pending(self, waiting: Pending, refresh: bool) -> bool:
        """Queue a Pending write if needed; True when a position is left stale for now."""
        key, position = waiting.key, waiting.position
        if key in self.outbox:  # an eviction to write first; its Pending write comes next cycle
            return True
        due = self.positions_due.get(key)  # queued, not yet written: what it will say
        last = (due.reason, due.position) if due is not None else self.written_positions.get(key)
        # The job a reservation is for is told where (its message names the UltraServers the
        # Reserved column shows): rewrite it when that changes or the reservation ends.
        said = self.reserved_messages.get(key)
        holder = key in self.reserved.values()
        now_says = reservation_said(waiting.message) if holder else None
        stale = said != now_says
        if (last is None or last[0] != waiting.reason or stale
                or (refresh and moved(last[1], position))):
            self.outbox[key] = Transition("pending", waiting.reason, waiting.message,
                                          position=position)
            return False
        return moved(last[1], position)

    def _collect_ghosts(self) -> None:
        for name in list(self.ghosts):
            if not self.allocator.jobs_in([name]):
                self.allocator.remove_ultraserver(name)
                self.ghosts.discard(name)
