"""The operator's writers: the only code that calls the Kubernetes API.

Why one place: every call goes through one bounded thread pool (`concurrency` at a time), and
the rules that keep a restart safe live here next to the calls they guard: a status write is
a merge patch guarded by `resourceVersion` (409 -> re-read and retry, or give up on a job that
is being deleted), a job that is gone is forgotten, and what was written is remembered so the
next cycle rewrites only what changed.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, Protocol

from ultraplane.operator import statuses
from ultraplane.operator.jobviews import (
    HOLDING_PHASES,
    INFERENCE,
    TERMINAL_PHASES,
    plural_of_key,
    view_job,
)
from ultraplane.operator.kube import Conflict, Gone
from ultraplane.operator.observations import Observations
from ultraplane.operator.transitions import (
    Transition,
    event_type,
    reservation_said,
    status_of,
    total_chips,
)

from ultraplane.ids import JobKey, kind_of_job_key

log = logging.getLogger("ultraplane.operator")


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


class Writers(Observations):
    """Reads and writes of the API server, on top of the cache they keep current."""

    kube: Kube
    clock: Callable[[], datetime]
    namespaces: list[str] | None
    unfinalize: set[JobKey]
    reserved: dict[str, JobKey]
    reserved_messages: dict[JobKey, str]
    written_us: dict[str, dict[str, Any]]
    us_seconds: float
    us_settle_seconds: float
    us_max_seconds: float
    _us_gap: float
    _us_touched: dict[str, float]
    _us_dirty: dict[str, float]
    _pool: ThreadPoolExecutor
    _limit: asyncio.Semaphore
    positions_due: dict[JobKey, Transition]  # the newest Pending write of each job not yet sent
    _position_heap: list[tuple[int, int, JobKey, Transition]]  # head first; replaced ones skipped
    _position_seq: Iterator[int]
    _position_writers: list[asyncio.Task[None]]
    _position_width: int  # writers for positions (an eighth of `concurrency`)
    _admitting: dict[JobKey, asyncio.Task[None]]  # admission writes in flight
    on_written: Callable[[JobKey], None] | None  # after each status write (the pod data plane)

    # -- reads -------------------------------------------------------------------------
    async def list_fleet(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._call(self.kube.list_ultraservers, self.fleet)
        return result

    async def list_all_jobs(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._call(self.kube.list_jobs, self.namespaces)
        return result

    # -- batches, in the order a cycle needs them --------------------------------------
    async def flush(self) -> None:
        """Write evictions (everything that must precede admissions), and let the deletion of
        jobs that still carry an earlier version's finalizer finish."""
        batch = {k: t for k, t in self.outbox.items() if t.kind != "pending"}
        for key in batch:
            del self.outbox[key]
        unfinalize, self.unfinalize = self.unfinalize, set()
        _, results = await asyncio.gather(
            asyncio.gather(*(self._unfinalize(k) for k in unfinalize)),
            self.write_all(batch))
        for key, done in results.items():
            # Retry evictions that did not land; never retry onto a job that has gone.
            if not done and key in self.bodies:
                self.outbox.setdefault(key, batch[key])
                self.wake.set()

    def start_positions(self) -> None:
        """Queue this cycle's reasons and queue positions, and keep their writers running.

        They are informative only, so they go in the background with at most an eighth of the
        writers (admissions keep the rest) and must not hold back the next cycle. Why a queue
        and not rounds: a deep queue's first positions are thousands of writes, and a round
        finished before the next began, so the head's new position waited for the whole
        round. Now each writer takes the job nearest the head that is due, and a newer
        position of a job replaces the one still waiting; the head is never behind the tail.
        """
        for key in [k for k, t in self.outbox.items() if t.kind == "pending"]:
            change = self.outbox.pop(key)
            self.positions_due[key] = change
            heapq.heappush(self._position_heap,
                           (change.position or 0, next(self._position_seq), key, change))
        if len(self._position_heap) > 2 * len(self.positions_due) + 64:  # drop replaced ones
            self._position_heap = [e for e in self._position_heap
                                   if self.positions_due.get(e[2]) is e[3]]
            heapq.heapify(self._position_heap)
        self._position_writers = [t for t in self._position_writers if not t.done()]
        while len(self._position_writers) < min(self._position_width, len(self.positions_due)):
            self._position_writers.append(asyncio.create_task(self._write_positions()))

    async def _write_positions(self) -> None:
        """One writer: the due position nearest the head, until none is due."""
        while self._position_heap:
            _, _, key, change = heapq.heappop(self._position_heap)
            if self.positions_due.get(key) is not change:
                continue  # replaced by a newer one (still queued) or written
            del self.positions_due[key]
            try:
                await self._write(key, change)
            except Exception:  # informative only: the next cycle that sees it moved retries
                log.exception("position write for %s failed", key)

    async def positions_written(self) -> None:
        """Wait until no position is due and none is being written (tests, shutdown)."""
        while self._position_writers:
            await asyncio.gather(*self._position_writers, return_exceptions=True)
            self._position_writers = [t for t in self._position_writers if not t.done()]

    async def write_all(self, batch: Mapping[JobKey, Transition]) -> dict[JobKey, bool]:
        keys = list(batch)
        done = await asyncio.gather(*(self._write(k, batch[k]) for k in keys))
        return dict(zip(keys, done, strict=True))

    # -- single writes -----------------------------------------------------------------
    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        async with self._limit:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def _write(self, key: JobKey, change: Transition) -> bool:
        for _ in range(4):
            body = self.bodies.get(key)
            if body is None:
                return False
            current = body.get("status") or {}
            if current.get("phase") in TERMINAL_PHASES and change.kind not in ("fail", "finish"):
                return False
            if change.kind == "pending" and not self.scheduler.is_queued(key):
                return False  # admitted (or gone) since: a late Pending must never overwrite it
            if change.kind in ("admit", "replace") and not self.scheduler.is_running(key):
                return False  # evicted or gone since it was decided: never write it Admitted
            if change.kind in ("run", "succeed") and current.get("phase") not in HOLDING_PHASES:
                return False  # evicted since the pods were read
            meta = body["metadata"]
            plural = plural_of_key(key)
            status = status_of(current, change, self.clock(), replicated=plural == INFERENCE)
            if plural == INFERENCE:  # the job's size for the Chips column (replicas x per replica)
                status["chips"] = total_chips(body.get("spec") or {})
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
            self._written(key, change)
            log.debug("status of %s written: %s %s (position %s)", key, change.kind,
                      change.reason, change.position)
            if self.on_written is not None:  # the pod data plane acts on it at once
                self.on_written(key)
            kind = event_type(change, str(current.get("phase") or ""))
            if kind is not None:
                self.emit(new, kind, status["reason"], status["message"])
            return True
        return False

    def _written(self, key: JobKey, change: Transition) -> None:
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

    # -- UltraServers ------------------------------------------------------------------
    async def flush_ultraservers(self) -> None:
        """Write allocated/free for every UltraServer whose figures changed (every replica of
        an InferenceJob counts; `jobs` names jobs, not replicas). A job whose admission is still
        being written is left out until it lands: the view follows what job statuses say.

        Why an UltraServer may be put off: in a burst of admissions its figures move with
        every few jobs, and a view rewritten each interval while it fills costs the API
        server a write per UltraServer per interval. So one whose last admission landed less
        than `us_settle_seconds` ago waits for a later round, unless its view has been behind
        for `us_max_seconds`: a filling UltraServer is written about once, when it is full."""
        report = self.allocator.capacity()
        jobs_by_us: dict[str, set[str]] = {}
        servers_by_us: dict[str, set[str]] = {}
        unwritten: set[str] = set()
        for part, placement in self.allocator.allocations().items():
            key = self._owner(part)
            if key in self._admitting:
                unwritten.update(placement.ultraservers)
                continue
            for us in placement.ultraservers:
                jobs_by_us.setdefault(us, set()).add(key)
            for server in placement.servers:
                servers_by_us.setdefault(server.split("/")[0], set()).add(server)
        now = self.clock()
        mono = asyncio.get_running_loop().time()
        writes = []
        put_off = False
        for cap in report.ultraservers:
            entry = self.inventory.get(cap.name)
            if entry is None or cap.name in unwritten:  # the next round writes it
                continue
            status = statuses.ultraserver(cap, list(jobs_by_us.get(cap.name, ())), now)
            status["allocated"]["servers"] = len(servers_by_us.get(cap.name, ()))
            status["capacity"]["servers"] = entry.ultraserver.server_count
            status["reservedFor"] = self.reserved.get(cap.name)  # None: merge patch removes it
            compare = {k: v for k, v in status.items() if k != "heartbeatTime"}
            if self.written_us.get(cap.name) == compare:
                self._us_dirty.pop(cap.name, None)
                continue
            behind = mono - self._us_dirty.setdefault(cap.name, mono)
            if (mono - self._us_touched.get(cap.name, float("-inf")) < self.us_settle_seconds
                    and behind < self.us_max_seconds):
                put_off = True
                continue
            if log.isEnabledFor(logging.DEBUG):
                was = self.written_us.get(cap.name) or {}
                log.debug("UltraServer %s view: %s changed", cap.name,
                          [k for k in compare if compare[k] != was.get(k)])
            self.written_us[cap.name] = compare
            self._us_dirty.pop(cap.name, None)
            writes.append(self._write_us(cap.name, status))
        self._us_gap = self.us_seconds if writes else self.us_settle_seconds
        log.debug("UltraServer round: %d written, %s put off, %d with admissions in flight",
                  len(writes), put_off, len(unwritten))
        if put_off or unwritten:  # come back for them
            asyncio.get_running_loop().call_later(self._us_gap, self.wake.set)
        await asyncio.gather(*writes)

    async def _write_us(self, name: str, status: dict[str, Any]) -> None:
        status.pop("heartbeatTime", None)
        try:
            await self._call(self.kube.patch_ultraserver_status, name, status)
        except Exception as exc:
            log.debug("UltraServer %s status write failed: %s", name, exc)
            self.written_us.pop(name, None)
