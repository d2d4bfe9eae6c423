"""The operator's writers: the only code that calls the Kubernetes API.

Why one place: every call goes through one bounded thread pool (`concurrency` at a time), and
the rules that keep a restart safe live here next to the calls they guard: a status write (a
core decision as the core's builder documents it, `statuses.document`) is a merge patch guarded by `resourceVersion` (409 -> re-read and retry, or give up on a job that
is being deleted), a job that is gone is forgotten, and what was written is remembered (in the
`Outbox`) so the next cycle rewrites only what changed. The UltraServer views go through the
same pool (`ultraserverviews`).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, Protocol

from ultraplane.operator.jobviews import (
    HOLDING_PHASES,
    INFERENCE,
    TERMINAL_PHASES,
    plural_of_key,
    view_job,
)
from ultraplane.operator.kube import Conflict, Gone
from ultraplane.operator.movewrites import clashes, recorded_holders
from ultraplane.operator.observations import ObservationCache
from ultraplane.operator.outboxes import Outbox
from ultraplane.operator.statuses import (
    PodsSaid,
    Queued,
    ReplicasReady,
    Resized,
    Write,
    document,
    event_type,
    total_chips,
)

from ultraplane.ids import JobKey, kind_of_job_key
from ultraplane.pods.launches import LABEL_JOB_UID
from ultraplane.scheduling.decisions import Admitted, Failed, Finished, Moved, Pending, Replaced

log = logging.getLogger("ultraplane.operator")
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
    def list_tenantqueues(self, fleet: str | None) -> list[dict[str, Any]]: ...
    def patch_tenantqueue_status(self, name: str, status: Mapping[str, Any]) -> None: ...
    def list_tenantcohorts(self, fleet: str | None) -> list[dict[str, Any]]: ...
    def patch_tenantcohort_status(self, name: str, status: Mapping[str, Any]) -> None: ...
    def list_powerbudgets(self, fleet: str | None) -> list[dict[str, Any]]: ...
    def patch_powerbudget_status(self, name: str, status: Mapping[str, Any]) -> None: ...


class ApiCalls:
    """The bounded thread pool every call of the writers goes through (`concurrency` at a
    time; the Kubernetes client blocks, the event loop must not)."""

    def __init__(self, kube: Kube, concurrency: int) -> None:
        self.kube = kube
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="kube")
        self._limit = asyncio.Semaphore(concurrency)

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        async with self._limit:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)


class StatusWriters:
    """Sends the outbox's job status writes: evictions, admissions in the background in queue
    order, queue positions by a few writers of their own. Reads and updates the cache (the
    body each write is guarded by) and tells `on_written` after each write lands."""

    def __init__(self, api: ApiCalls, cache: ObservationCache, outbox: Outbox, *,
                 clock: Callable[[], datetime], emit: Emit,
                 namespaces: list[str] | None = None, concurrency: int = 16) -> None:
        self.api = api
        self.kube = api.kube
        self.cache = cache
        self.outbox = outbox
        self.clock = clock
        self.emit = emit
        self.namespaces = namespaces
        self.wake = cache.wake
        self.positions_due: dict[JobKey, Pending] = {}  # newest Pending write not yet sent
        self._position_heap: list[tuple[int, int, JobKey, Pending]] = []  # head first
        self._position_seq = itertools.count()
        self._position_writers: list[asyncio.Task[None]] = []
        # position writes may take an eighth of the writers: admissions keep the rest
        self.position_width = max(1, concurrency // 8)
        self.admitting: dict[JobKey, asyncio.Task[None]] = {}  # admission writes in flight
        self.on_written: Callable[[JobKey], None] | None = None  # after each status write
        # after an admission lands
        self.on_admitted: Callable[[Admitted | Replaced], None] | None = None

    # -- reads -------------------------------------------------------------------------
    async def list_fleet(self, fleet: str | None) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._call(self.kube.list_ultraservers, fleet)
        return result

    async def list_all_jobs(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._call(self.kube.list_jobs, self.namespaces)
        return result

    # -- batches, in the order a cycle needs them --------------------------------------
    async def flush(self) -> None:
        """Write evictions (everything that must precede admissions), and let the deletion of
        jobs that still carry an earlier version's finalizer finish."""
        batch = self.outbox.take()
        cache = self.cache
        unfinalize, cache.unfinalize = cache.unfinalize, set()
        _, results = await asyncio.gather(
            asyncio.gather(*(self._unfinalize(k) for k in unfinalize)),
            self.write_all(batch))
        for key, done in results.items():
            # Retry evictions that did not land; never retry onto a job that has gone.
            if not done and key in cache.bodies:
                self.outbox.put_if_absent(key, batch[key])
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
        for key, change in self.outbox.take_pending().items():
            self.positions_due[key] = change
            heapq.heappush(self._position_heap,
                           (change.position, next(self._position_seq), key, change))
        if len(self._position_heap) > 2 * len(self.positions_due) + 64:  # drop replaced ones
            self._position_heap = [e for e in self._position_heap
                                   if self.positions_due.get(e[2]) is e[3]]
            heapq.heapify(self._position_heap)
        self._position_writers = [t for t in self._position_writers if not t.done()]
        while len(self._position_writers) < min(self.position_width, len(self.positions_due)):
            self._position_writers.append(asyncio.create_task(self._write_positions()))

    async def _write_positions(self) -> None:
        """One writer: the due position nearest the head, until none is due."""
        while self._position_heap:
            _, _, key, change = heapq.heappop(self._position_heap)
            if self.positions_due.get(key) is not change:
                continue  # replaced by a newer one (still queued) or written
            del self.positions_due[key]
            try:
                await self.write(key, change)
            except Exception:  # informative only: the next cycle that sees it moved retries
                log.exception("position write for %s failed", key)

    async def positions_written(self) -> None:
        """Wait until no position is due and none is being written (tests, shutdown)."""
        while self._position_writers:
            await asyncio.gather(*self._position_writers, return_exceptions=True)
            self._position_writers = [t for t in self._position_writers if not t.done()]

    async def write_all(self, batch: Mapping[JobKey, Queued]) -> dict[JobKey, bool]:
        keys = list(batch)
        done = await asyncio.gather(*(self.write(k, batch[k]) for k in keys))
        return dict(zip(keys, done, strict=True))

    def start_admissions(self, batch: Mapping[JobKey, Admitted]) -> None:
        """Write admissions in the background, in queue order (the semaphore is FIFO)."""
        for key, change in batch.items():
            self.admitting[key] = asyncio.create_task(self._admit(key, change))

    async def _admit(self, key: JobKey, change: Admitted) -> None:
        try:
            done = await self.write(key, change)
        except Exception:  # never leave an admission unaccounted for
            log.exception("admission write for %s failed", key)
            done = False
        finally:
            self.admitting.pop(key, None)
        if done and self.on_admitted is not None:  # its UltraServers' figures just moved
            self.on_admitted(change)
        if not done and self.cache.admissions.unwritten(key):
            self.wake.set()  # not persisted: its chips are free, decided again
        if not self.admitting:  # drained: the UltraServer view may now include them
            self.wake.set()

    async def admissions_written(self) -> None:
        """Wait until every admission write started so far has landed (or given up)."""
        while self.admitting:
            await asyncio.gather(*list(self.admitting.values()), return_exceptions=True)

    # -- single writes -----------------------------------------------------------------
    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await self.api.call(fn, *args)

    async def write(self, key: JobKey, change: Write) -> bool:
        """Write one decision of `key` (or what its pods said) now, guarded by its
        resourceVersion (409 -> re-read and retry). False when it did not land or no longer
        applies (the job evicted, gone, admitted since)."""
        cache = self.cache
        admissions = cache.admissions
        for _ in range(4):
            body = cache.bodies.get(key)
            if body is None:
                return False
            current = body.get("status") or {}
            if current.get("phase") in TERMINAL_PHASES and not isinstance(change,
                                                                          Failed | Finished):
                return False
            if isinstance(change, Pending) and not admissions.is_waiting(key):
                return False  # admitted (or gone) since: a late Pending must never overwrite it
            if isinstance(change, Admitted | Replaced) and not admissions.is_running(key):
                return False  # evicted or gone since it was decided: never write it Admitted
            if isinstance(change, Moved) and not admissions.is_running(key):
                return True  # evicted since: its eviction's write says where it stands
            if isinstance(change, Moved) and (holder := clashes(
                    key, change.chip_ids, recorded_holders(cache.bodies))) is not None:
                # its new chips are still on `holder`'s record (a chain of moves): written
                # once that job's record says it left them (`movewrites`)
                log.debug("move of %s waits for %s's record", key, holder)
                return False
            if isinstance(change, PodsSaid | ReplicasReady) \
                    and current.get("phase") not in HOLDING_PHASES:
                return False  # evicted since the pods were read
            if isinstance(change, Resized) and not admissions.is_running(key):
                return True  # evicted since: its eviction's write says where it stands
            meta = body["metadata"]
            plural = plural_of_key(key)
            status = document(current, change, self.clock(), replicated=plural == INFERENCE)
            if plural == INFERENCE:  # the job's size for the Chips column (replicas x per replica)
                status["chips"] = total_chips(body.get("spec") or {})
                # the pods' selector, for the scale subresource (an HPA finds the pods by it)
                status["selector"] = f"{LABEL_JOB_UID}={meta.get('uid', '')}"
            try:
                new = await self._call(self.kube.patch_job_status, plural, meta["namespace"],
                                       meta["name"], status, meta.get("resourceVersion", ""))
            except Conflict:
                try:
                    fresh = await self._call(self.kube.get_job, plural, meta["namespace"],
                                             meta["name"])
                except Gone:
                    cache.forget(key)
                    return False
                cache.remember(key, fresh)
                if view_job(fresh, kind_of_job_key(key)).deleting:
                    return False
                continue
            except Gone:
                cache.forget(key)
                return False
            except Exception as exc:
                log.warning("status write for %s failed: %s", key, exc)
                return False
            cache.remember(key, new)
            self.outbox.written(key, change)
            if plural == INFERENCE:  # an edit of spec.replicas may have waited for this write
                cache.follow_replicas(key)
            log.debug("status of %s written: %s %s", key, type(change).__name__,
                      status.get("reason"))
            if self.on_written is not None:  # the pod data plane acts on it at once
                self.on_written(key)
            kind = event_type(change, str(current.get("phase") or ""))
            if kind is not None:
                self.emit(new, kind, status["reason"], status["message"])
            elif isinstance(change, Resized) and status.get("scalingMessage"):
                self.emit(new, "Normal", "Rescaled", status["scalingMessage"])
            return True
        return False

    async def _unfinalize(self, key: JobKey) -> None:
        removing = self.cache.removing
        body = removing.get(key)
        if body is None:
            return
        meta = body["metadata"]
        plural = plural_of_key(key)
        try:
            await self._call(self.kube.set_finalizer, plural, meta["namespace"], meta["name"],
                             list(meta.get("finalizers") or []), False,
                             meta.get("resourceVersion", ""))
        except Gone:
            removing.pop(key, None)
            return
        except Exception as exc:  # a conflict: retry on the fresh body
            log.debug("finalizer removal for %s deferred: %s", key, exc)
            self.wake.set()
            self.cache.unfinalize.add(key)
            try:
                removing[key] = await self._call(self.kube.get_job, plural,
                                                 meta["namespace"], meta["name"])
            except Gone:
                removing.pop(key, None)
            return
        removing.pop(key, None)
