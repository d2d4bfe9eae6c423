"""The admission loop: watch events update a cache, one loop runs the scheduler and writes status.

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
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from ultraplane.operator import statuses
from ultraplane.operator.inventory import Inventory
from ultraplane.operator.kube import Conflict, Gone
from ultraplane.operator.observations import Observations
from ultraplane.operator.requests import (
    INFERENCE,
    TERMINAL_PHASES,
    expected_end,
    plural_of_key,
    view_job,
)

from ultraplane.admissions import Admissions, Pending
from ultraplane.allocator import Allocator, Placement
from ultraplane.ids import JobKey, kind_of_job_key
from ultraplane.topology import Topology

log = logging.getLogger("ultraplane.operator")
STARTUP_RESYNCS = (3.0, 15.0)  # seconds after a (re)start: see Controller.sync
Emit = Callable[[Mapping[str, Any], str, str, str], None]


class Kube(Protocol):
    """The API calls of the operator; `plural` is `trainingjobs` or `inferencejobs`."""

    def list_ultraservers(self, fleet: str | None) -> list[dict[str, Any]]: ...
    def list_jobs(self, namespaces: list[str] | None) -> list[dict[str, Any]]: ...
    def get_job(self, plural: str, namespace: str, name: str) -> dict[str, Any]: ...
    def patch_job_status(self, plural: str, namespace: str, name: str,
                         status: Mapping[str, Any], resource_version: str) -> dict[str, Any]: ...
    def set_finalizer(self, plural: str, namespace: str, name: str, finalizers: list[str],
                      present: bool, resource_version: str) -> dict[str, Any]: ...
    def patch_ultraserver_status(self, name: str, status: Mapping[str, Any]) -> None: ...


@dataclass(frozen=True)
class Transition:
    """A status change to persist: `kind` is admit | replace | pending | preempt | restart | fail.

    `placements` (admit, replace) holds one placement for a TrainingJob, one per replica for an
    InferenceJob.
    """

    kind: str
    reason: str
    message: str = ""
    placements: tuple[Placement, ...] = ()
    position: int | None = None


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
            log.info("admission cycles: %d in %.0fs; decide p50 %.4fs p99 %.4fs; with writes "
                     "p50 %.4fs p99 %.4fs", len(self.total), now - self.since,
                     quantile(self.decide, 0.5), quantile(self.decide, 0.99),
                     quantile(self.total, 0.5), quantile(self.total, 0.99))
            self.decide, self.total, self.since = [], [], now


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def moved(old: int | None, new: int) -> bool:
    """Whether a written queue position is worth rewriting: exact near the head of the queue,
    within 10% further back (a queue of thousands would otherwise rewrite every job per cycle)."""
    if old is None:
        return True
    if new <= 50 or old <= 50:
        return old != new
    return abs(new - old) >= max(10, old // 10)


class Controller(Observations):
    """Owns the allocator and scheduler of one operator replica (the leader)."""

    def __init__(self, kube: Kube, *, clock: Callable[[], datetime], emit: Emit,
                 namespaces: list[str] | None = None, fleet: str | None = None,
                 concurrency: int = 16, reservation: bool = True,
                 batch_seconds: float = 0.05, position_seconds: float = 2.0,
                 us_seconds: float = 5.0, resync_seconds: float = 300.0,
                 stats_seconds: float = 30.0) -> None:
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
        self.admissions = Admissions(self.allocator, reservation=reservation)
        self.scheduler = self.admissions.scheduler
        self.bodies: dict[JobKey, dict[str, Any]] = {}
        self.outbox: dict[JobKey, Transition] = {}
        self.unfinalize: set[JobKey] = set()  # deleting jobs still carrying our old finalizer
        self.ghosts: set[str] = set()
        self.written_positions: dict[JobKey, tuple[str, int | None]] = {}
        self.written_us: dict[str, dict[str, Any]] = {}
        self.reserved: dict[str, JobKey] = {}  # UltraServer -> job held back for (last cycle)
        self.buffered: dict[JobKey, tuple[dict[str, Any], bool]] = {}
        self.removing: dict[JobKey, dict[str, Any]] = {}
        self.ready = False
        self.leader = True
        self.wake = asyncio.Event()
        self.cycles = 0
        self.cycle_stats = CycleStats(every=stats_seconds)
        self._positions: asyncio.Task[None] | None = None
        # position writes may take an eighth of the writers: admissions keep the rest
        self._position_limit = asyncio.Semaphore(max(1, concurrency // 8))
        self._last_positions = 0.0
        self._last_us = 0.0
        self.us_seconds = us_seconds
        self.resync_seconds = resync_seconds
        self._last_resync = 0.0
        self._resync_due = False
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="kube")
        self._limit = asyncio.Semaphore(concurrency)

    # -- startup / recovery ------------------------------------------------------------
    async def sync(self) -> None:
        """Rebuild state from the API server: allocations live in job status, not in memory."""
        servers = await self._call(self.kube.list_ultraservers, self.fleet)
        jobs = await self._call(self.kube.list_jobs, self.namespaces)
        for body in servers:
            self.observe_ultraserver(body, settle=False)
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
        while True:
            with contextlib.suppress(TimeoutError):  # no event for a while: resync anyway
                await asyncio.wait_for(self.wake.wait(), timeout=self.resync_seconds)
            self.wake.clear()
            await asyncio.sleep(self.batch_seconds)
            if not (self.ready and self.leader):
                continue
            try:
                if self._resync_due or loop.time() - self._last_resync >= self.resync_seconds:
                    self._last_resync, self._resync_due = loop.time(), False
                    await self.resync()
                await self.run_cycle()
            except Exception:  # one bad cycle must not stop admission for good
                log.exception("admission cycle failed; retrying")
                await asyncio.sleep(1.0)
                self.wake.set()

    async def resync(self) -> None:
        """Forget jobs deleted while their DELETED event was missed (a watch gap).

        Jobs carry no finalizer of ours, so a deletion is seen on the watch or here: a job known
        before the list started and absent from it (or present with another uid) is gone. A job
        first seen during the list is left alone, since the list may predate it."""
        known = {key: body["metadata"].get("uid") for key, body in self.bodies.items()}
        listed = await self._call(self.kube.list_jobs, self.namespaces)
        present = {view_job(b).key: b["metadata"].get("uid") for b in listed}
        gone = [k for k, uid in known.items()
                if present.get(k) != uid and (self.bodies.get(k) or {}).get(
                    "metadata", {}).get("uid") == uid]
        for key in gone:
            self.forget(key)
        if gone:
            log.info("resync: %d deleted job(s) released their chips", len(gone))

    async def run_cycle(self) -> None:
        self.cycles += 1
        started = asyncio.get_running_loop().time()
        # Predicted ends of running jobs (from their progress) and the clock turn on the
        # core's EASY backfilling and split-when-it-pays decisions.
        clock = self.clock()
        for key in self.scheduler.running():
            body = self.bodies.get(key)
            if body is not None:
                self.admissions.expect_end(key, expected_end(body.get("status") or {}, clock))
        decisions = self.admissions.cycle(now=clock.timestamp())
        decided = asyncio.get_running_loop().time()
        self.reserved = decisions.held_for()
        for victim in decisions.preempted:
            self.outbox[victim.key] = Transition(
                "preempt", "Preempted",
                f"Preempted by higher-priority job {victim.by}; requeued.")
        for failed in decisions.failed:
            self.outbox[failed.key] = Transition("fail", failed.reason, failed.message)
        now = asyncio.get_running_loop().time()
        refresh = now - self._last_positions >= self.position_seconds
        if refresh:
            self._last_positions = now
        stale = False
        for waiting in decisions.pending:
            stale |= self._pending(waiting, refresh)
        if stale:  # positions moved; write them once the refresh interval has passed
            asyncio.get_running_loop().call_later(self.position_seconds, self.wake.set)
        admissions = {a.key: Transition("admit", "Admitted", a.message, a.placements)
                      for a in decisions.admitted}
        self._collect_ghosts()
        # Evictions first: an admission may take a victim's chips.
        await self.flush()
        ok = await self._gather(admissions)
        for key, done in ok.items():
            if not done and self.scheduler.is_running(key):
                self.scheduler.requeue(key)
                self.wake.set()
        self.start_positions()
        loop = asyncio.get_running_loop()
        if loop.time() - self._last_us >= self.us_seconds:
            self._last_us = loop.time()
            await self.flush_ultraservers()
        else:  # coalesce UltraServer writes: at most one round per interval
            loop.call_later(self.us_seconds, self.wake.set)
        log.debug("cycle %d: %d admitted, %d preempted, %d pending in %.3fs", self.cycles,
                  len(admissions), len(decisions.preempted), len(decisions.pending),
                  loop.time() - started)
        self.cycle_stats.add(decided - started, loop.time() - started, loop.time())

    def _pending(self, waiting: Pending, refresh: bool) -> bool:
        """Queue a Pending write if needed; True when a position is left stale for now."""
        key, position = waiting.key, waiting.position
        if key in self.outbox:  # an eviction to write first; its Pending write comes next cycle
            return True
        last = self.written_positions.get(key)
        if last is None or last[0] != waiting.reason or (refresh and moved(last[1], position)):
            self.outbox[key] = Transition("pending", waiting.reason, waiting.message,
                                          position=position)
            return False
        return moved(last[1], position)

    async def flush(self) -> None:
        """Write evictions (everything that must precede admissions), and let the deletion of
        jobs that still carry an earlier version's finalizer finish."""
        batch = {k: t for k, t in self.outbox.items() if t.kind != "pending"}
        for key in batch:
            del self.outbox[key]
        unfinalize, self.unfinalize = self.unfinalize, set()
        _, results = await asyncio.gather(
            asyncio.gather(*(self._unfinalize(k) for k in unfinalize)),
            self._gather(batch))
        for key, done in results.items():
            # Retry evictions that did not land; never retry onto a job that has gone.
            if not done and key in self.bodies:
                self.outbox.setdefault(key, batch[key])
                self.wake.set()

    def start_positions(self) -> None:
        """Write reasons and queue positions in the background: they are informative only, and
        a deep queue's rewrites (hundreds when the head moves) must not hold back the next
        cycle's admissions. One round at a time; what comes meanwhile waits for the next."""
        if self._positions is None or self._positions.done():
            self._positions = asyncio.create_task(self.flush_pending())

    async def positions_written(self) -> None:
        """Wait for the round of position writes in flight (tests, shutdown)."""
        if self._positions is not None:
            await self._positions

    async def flush_pending(self) -> None:
        """Reasons and queue positions: informative only, so written after the admissions."""
        batch, self.outbox = self.outbox, {}
        pending = sorted(((k, t) for k, t in batch.items() if t.kind == "pending"),
                         key=lambda kt: kt[1].position or 0)  # the head of the queue first
        self.outbox.update({k: t for k, t in batch.items() if t.kind != "pending"})

        async def one(key: JobKey, change: Transition) -> None:
            async with self._position_limit:
                await self._write(key, change)

        await asyncio.gather(*(one(k, t) for k, t in pending))
        if any(t.kind == "pending" for t in self.outbox.values()):
            self.wake.set()  # queued while this round ran

    async def _gather(self, batch: Mapping[JobKey, Transition]) -> dict[JobKey, bool]:
        keys = list(batch)
        done = await asyncio.gather(*(self._write(k, batch[k]) for k in keys))
        return dict(zip(keys, done, strict=True))

    # -- writes ------------------------------------------------------------------------
    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        async with self._limit:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def _write(self, key: JobKey, change: Transition) -> bool:
        for _ in range(4):
            body = self.bodies.get(key)
            if body is None:
                return False
            current = body.get("status") or {}
            if current.get("phase") in TERMINAL_PHASES and change.kind != "fail":
                return False
            if change.kind == "pending" and not self.scheduler.is_queued(key):
                return False  # admitted (or gone) since: a late Pending must never overwrite it
            meta = body["metadata"]
            plural = plural_of_key(key)
            status = self._status(current, change, replicated=plural == INFERENCE)
            try:
                new = await self._call(self.kube.patch_job_status, plural, meta["namespace"],
                                       meta["name"], status, meta.get("resourceVersion", ""))
            except Conflict:
                try:
                    fresh = await self._call(self.kube.get_job, plural, meta["namespace"],
                                             meta["name"])
                except Gone:
                    self.forget(key)
                    return False
                self.remember(key, fresh)
                if view_job(fresh, kind_of_job_key(key)).deleting:
                    return False
                continue
            except Gone:
                self.forget(key)
                return False
            except Exception as exc:
                log.warning("status write for %s failed: %s", key, exc)
                return False
            self.remember(key, new)
            if change.kind == "pending":
                self.written_positions[key] = (change.reason, change.position)
            else:
                self.written_positions.pop(key, None)
            if change.kind != "pending" or current.get("phase") != "Pending":
                self.emit(new, "Normal" if change.kind in ("admit", "pending") else "Warning",
                          status["reason"], status["message"])
            return True
        return False

    def _status(self, current: Mapping[str, Any], change: Transition, *,
                replicated: bool = False) -> dict[str, Any]:
        now = self.clock()
        if change.kind in ("admit", "replace"):
            assert change.placements
            if replicated:
                status = statuses.admitted_replicas(current, change.placements, now,
                                                    change.reason)
            else:
                status = statuses.admitted(current, change.placements[0], now, change.reason,
                                           change.message)
            if change.kind == "replace":
                status["restarts"] = int(current.get("restarts") or 0) + 1
            return status
        if change.kind == "pending":
            return statuses.pending(current, change.reason, change.message, change.position, now)
        if change.kind == "fail":
            return statuses.failed(current, change.reason, change.message, now)
        return statuses.preempted(current, change.reason, change.message, now,
                                  restart=change.kind == "restart")

    async def _unfinalize(self, key: JobKey) -> None:
        body = self.removing.get(key)
        if body is None:
            return
        meta = body["metadata"]
        plural = plural_of_key(key)
        try:
            await self._call(self.kube.set_finalizer, plural, meta["namespace"], meta["name"],
                             list(meta.get("finalizers") or []), False,
                             meta.get("resourceVersion", ""))
        except Gone:
            self.removing.pop(key, None)
            return
        except Exception as exc:  # a conflict: retry on the fresh body
            log.debug("finalizer removal for %s deferred: %s", key, exc)
            self.wake.set()
            self.unfinalize.add(key)
            try:
                self.removing[key] = await self._call(self.kube.get_job, plural,
                                                      meta["namespace"], meta["name"])
            except Gone:
                self.removing.pop(key, None)
            return
        self.removing.pop(key, None)

    async def flush_ultraservers(self) -> None:
        """Write allocated/free for every UltraServer whose figures changed (every replica of
        an InferenceJob counts; `jobs` names jobs, not replicas)."""
        report = self.allocator.capacity()
        jobs_by_us: dict[str, set[str]] = {}
        servers_by_us: dict[str, set[str]] = {}
        for part, placement in self.allocator.allocations().items():
            key = self._owner(part)
            for us in placement.ultraservers:
                jobs_by_us.setdefault(us, set()).add(key)
            for server in placement.servers:
                servers_by_us.setdefault(server.split("/")[0], set()).add(server)
        now = self.clock()
        writes = []
        for cap in report.ultraservers:
            entry = self.inventory.get(cap.name)
            if entry is None:
                continue
            status = statuses.ultraserver(cap, list(jobs_by_us.get(cap.name, ())), now)
            status["allocated"]["servers"] = len(servers_by_us.get(cap.name, ()))
            status["capacity"]["servers"] = entry.ultraserver.server_count
            status["reservedFor"] = self.reserved.get(cap.name)  # None: merge patch removes it
            compare = {k: v for k, v in status.items() if k != "heartbeatTime"}
            if self.written_us.get(cap.name) != compare:
                self.written_us[cap.name] = compare
                writes.append(self._write_us(cap.name, status))
        await asyncio.gather(*writes)

    async def _write_us(self, name: str, status: dict[str, Any]) -> None:
        status.pop("heartbeatTime", None)
        try:
            await self._call(self.kube.patch_ultraserver_status, name, status)
        except Exception as exc:
            log.debug("UltraServer %s status write failed: %s", name, exc)
            self.written_us.pop(name, None)

    def _collect_ghosts(self) -> None:
        for name in list(self.ghosts):
            if not self.allocator.jobs_in([name]):
                self.allocator.remove_ultraserver(name)
                self.ghosts.discard(name)
