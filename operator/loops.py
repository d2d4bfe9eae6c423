"""The admission loop: watch events update a cache, one loop runs the driver and writes status.

The controller (`controllers.Controller`) composes small objects, each in its module: the cache
the watch events update (`observations.ObservationCache`), the outbox of the core's decisions
still to write (`outboxes.Outbox`; `statuses`: the document each becomes), the writers that send them
(`writers.StatusWriters`, the only code that calls the API), the UltraServer views
(`ultraserverviews`) and this loop (the cycle: what the driver's decisions mean for the outbox).

Why one loop and not a cycle per event: 5,000 jobs created at once must not cost 5,000 cycles.
Handlers only record what they saw (`observe_*`) and wake the loop; the loop waits a short batch
window, runs one cycle of the core driver (`Admissions.cycle()`) over everything that changed,
and persists its decisions as they are, with a bounded number of concurrent writes.

Why the write order matters (kill -9 safety): chips count as taken after a restart only if a job's
status says so, so evictions (preempted, restarted, failed) are written *before* the admissions
that reuse their chips, and a chip is never in two persisted allocations. An admission that was
not persisted is simply redone after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from ultraplane.operator.gctuning import PAUSES, HeapKeeper
from ultraplane.operator.jobviews import expected_end, view_job
from ultraplane.operator.movewrites import clashes, recorded_holders
from ultraplane.operator.observations import ObservationCache
from ultraplane.operator.outboxes import Outbox
from ultraplane.operator.statuses import Resized
from ultraplane.operator.ultraserverviews import UltraServerViews
from ultraplane.operator.writers import StatusWriters

from ultraplane.documents.jobstatuses import PendingSaid, pending_rewrite
from ultraplane.ids import JobKey
from ultraplane.scheduling.decisions import Admitted, Moved, Pending

__all__ = ["AdmissionLoop", "CycleStats", "LaunchGate"]

log = logging.getLogger("ultraplane.operator")
STARTUP_RESYNCS = (3.0, 15.0)  # seconds after a (re)start: see AdmissionLoop.sync
RESYNC_RETRY_SECONDS = 10.0  # after a resync's list failed
HOLD_POLL_SECONDS = 0.2  # how often held admissions look at the launch backlog again


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


class AdmissionLoop:
    """Runs the core driver's cycles on what the cache saw and hands their decisions to the
    outbox and the writers; resyncs beside them; holds for the pod plane's launch backlog.

    A lease gain hands it fresh state (`hand_over`): a new leader trusts only the API server."""

    def __init__(self, cache: ObservationCache, outbox: Outbox, writers: StatusWriters,
                 views: UltraServerViews, *, clock: Callable[[], datetime],
                 fleet: str | None = None, batch_seconds: float = 0.05,
                 position_seconds: float = 2.0, resync_seconds: float = 300.0,
                 stats_seconds: float = 30.0, gc_full_seconds: float | None = None) -> None:
        self.clock = clock
        self.fleet = fleet
        self.wake = cache.wake
        self.batch_seconds = batch_seconds
        self.position_seconds = position_seconds
        self.resync_seconds = resync_seconds
        self.stats_seconds = stats_seconds
        self.leader = True
        self.launches: LaunchGate | None = None  # the pod data plane's launch backlog
        self.held_seconds = 0.0  # time cycles were held for it, in total
        self.heap = HeapKeeper(gc_full_seconds)  # see operator/gctuning.py; None: CPython's own
        self.hand_over(cache, outbox, writers, views)

    def hand_over(self, cache: ObservationCache, outbox: Outbox, writers: StatusWriters,
                  views: UltraServerViews) -> None:
        """Work on these from now on (at start-up, and fresh ones on each lease gain)."""
        self.cache, self.outbox, self.writers, self.views = cache, outbox, writers, views
        self.admissions = cache.admissions
        self.cycles = 0
        self.cycle_stats = CycleStats(every=self.stats_seconds)
        self._held_since: float | None = None  # the hold under way began (loop time)
        self._last_positions = 0.0
        self._last_resync = 0.0
        self._resync_due = False
        self._resyncing: asyncio.Task[None] | None = None  # the resync in flight, if any

    # -- startup / recovery ------------------------------------------------------------
    async def sync(self) -> None:
        """Rebuild state from the API server: allocations live in job status, not in memory."""
        cache = self.cache
        servers = await self.writers.list_fleet(self.fleet)
        jobs = await self.writers.list_all_jobs()
        for body in servers:
            cache.observe_ultraserver(body, settle=False)
            self.views.found(str(body["metadata"]["name"]), body.get("status") or {})
        # Jobs holding chips first, so a waiting job never takes a chip that is already theirs.
        jobs.sort(key=lambda b: (b.get("status") or {}).get("phase") not in ("Admitted", "Running"))
        cache.ready = True
        for body in jobs:
            cache.observe_job(body)
        for body, deleted in list(cache.buffered.values()):
            cache.observe_job(body, deleted=deleted)
        cache.buffered.clear()
        for entry_name in cache.inventory.names():
            cache.enforce_health(entry_name, full=True)
        log.info("recovered %d UltraServers, %d jobs (%d holding chips)", len(servers),
                 len(jobs), len(self.admissions.running()))
        # Our list and kopf's watch are two reads: a job deleted between them is in the first
        # and never reaches the watch (no finalizer holds it). Two early resyncs close that gap.
        loop = asyncio.get_running_loop()
        for delay in STARTUP_RESYNCS:
            loop.call_later(delay, self.ask_resync)
        self.wake.set()

    def ask_resync(self) -> None:
        """Resync at the next cycle (not only at the interval)."""
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
                if not (self.cache.ready and self.leader):
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
        if why is None or self.outbox.has_evictions() or not self.admissions.waiting_count():
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
            asyncio.get_running_loop().call_later(RESYNC_RETRY_SECONDS, self.ask_resync)

    async def resync(self) -> None:
        """Forget jobs deleted while their DELETED event was missed (a watch gap).

        Jobs carry no finalizer of ours, so a deletion is seen on the watch or here: a job known
        before the list started and absent from it (or present with another uid) is gone. A job
        first seen during the list is left alone, since the list may predate it."""
        cache = self.cache
        known = {key: body["metadata"].get("uid") for key, body in cache.bodies.items()}
        listed = await self.writers.list_all_jobs()
        present = {view_job(b).key: b["metadata"].get("uid") for b in listed}
        gone = [k for k, uid in known.items()
                if present.get(k) != uid and (cache.bodies.get(k) or {}).get(
                    "metadata", {}).get("uid") == uid]
        for key in gone:
            cache.forget(key)
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
        outbox, writers, views = self.outbox, self.writers, self.views
        for key in self.admissions.running():
            body = self.cache.bodies.get(key)
            if body is not None:
                self.admissions.expect_end(key, expected_end(body.get("status") or {}, clock))
        budget = self.launches.budget() if self.launches is not None else None
        decisions = self.admissions.cycle(now=clock.timestamp(), launch_budget=budget)
        decided = loop.time()
        outbox.reserved = decisions.held_for()
        for victim in decisions.preempted:
            outbox.put(victim.key, victim)
        for failed in decisions.failed:
            outbox.put(failed.key, failed)
        for move in decisions.moved:  # written with the evictions, before any admission
            outbox.put(move.key, move)
        now = loop.time()
        refresh = now - self._last_positions >= self.position_seconds
        if refresh:
            self._last_positions = now
        stale = False
        for waiting in decisions.pending:
            stale |= self._pending(waiting, refresh)
        if stale:  # positions moved; write them once the refresh interval has passed
            loop.call_later(self.position_seconds, self.wake.set)
        admitted = {a.key: a for a in decisions.admitted}
        if decisions.deferred:  # the launch budget was spent: look again once pods are created
            loop.call_later(HOLD_POLL_SECONDS, self.wake.set)
        if self.launches is not None:  # the pod plane counts their pods from now on
            for a in decisions.admitted:
                queued = self.cache.submitted.get(a.key)
                if queued is not None and queued.launches:
                    self.launches.owe(a.key, sum(len(p.servers) for p in a.placements))
        for key in admitted.keys() | set(outbox):  # a queued position is stale now
            if key in admitted or not isinstance(outbox.get(key), Pending | None):
                writers.positions_due.pop(key, None)
        self.cache.collect_ghosts()
        if outbox.has_evictions():
            # An eviction may free chips an earlier cycle's admission still being written
            # holds, or evict that very job: the admissions in flight land first, then the
            # evictions, then the admissions that reuse the chips (the kill -9 order).
            await writers.admissions_written()
        await writers.flush()  # evictions first: an admission may take a victim's chips
        if decisions.moved or any(isinstance(outbox.get(k), Moved) for k in outbox):
            await self._moves_written(admitted)
        if decisions.scaled_up:  # added replicas may sit on the victims' chips just written
            for up in decisions.scaled_up:
                said = outbox.get(up.key)
                if said is None or isinstance(said, Resized):
                    outbox.put(up.key, said.then(up) if said is not None else Resized((up,)))
            await writers.flush()
        writers.start_admissions(admitted)
        if wait:
            await writers.admissions_written()
        writers.start_positions()
        views.start()
        if wait:
            await views.round_written()
        log.debug("cycle %d: %d admitted, %d preempted, %d pending in %.3fs", self.cycles,
                  len(admitted), len(decisions.preempted), len(decisions.pending),
                  loop.time() - started)
        self.cycle_stats.add(decided - started, loop.time() - started, loop.time())

    async def _moves_written(self, admitted: dict[JobKey, Admitted]) -> None:
        """After the evictions' flush, in a cycle with moves: the moves that waited for
        another moved job's record (a chain) are written as those land; an admission whose
        chips are still on another job's record (a move that did not land) is not written
        now, and is decided again (`movewrites`)."""
        outbox, writers = self.outbox, self.writers
        while (left := sum(isinstance(outbox.get(k), Moved) for k in outbox)) > 0:
            await writers.flush()
            if sum(isinstance(outbox.get(k), Moved) for k in outbox) >= left:
                break  # no progress this round: the next cycle tries again
        holders = recorded_holders(self.cache.bodies)
        for key, admission in list(admitted.items()):
            holder = clashes(key, admission.chip_ids, holders)
            if holder is None:
                continue
            log.info("admission of %s waits: %s's record still holds its chips", key, holder)
            del admitted[key]
            self.admissions.unwritten(key)
            self.wake.set()

    def _pending(self, waiting: Pending, refresh: bool) -> bool:
        """Queue a Pending write if the core's rule says so (`pending_rewrite`, the embedded
        API's too); a moved position waits for the next refresh. True when a position is left
        stale for now."""
        key, outbox = waiting.key, self.outbox
        if key in outbox:  # an eviction to write first; its Pending write comes next cycle
            return True
        due = self.writers.positions_due.get(key)  # queued, not yet written: what it will say
        said = PendingSaid.of(due.reason, due.position, due.message) if due is not None \
            else outbox.said.get(key)
        rewrite = pending_rewrite(said, waiting)
        if rewrite == "now" or (rewrite == "position" and refresh):
            outbox.put(key, waiting)
            return False
        return rewrite == "position"
