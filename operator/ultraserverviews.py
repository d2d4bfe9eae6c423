"""The UltraServers' status views: allocated and free chips, the jobs on each, a reservation.

Why apart from the job writers: a view is informative, never a decision. It follows what job
statuses say (a job whose admission is still being written is left out until it lands), goes
out in rounds in the background so it never holds back an admission, and is rewritten only
when it changes: an API server write per UltraServer per interval is what it must not cost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from ultraplane.operator import statuses
from ultraplane.operator.observations import ObservationCache
from ultraplane.operator.outboxes import Outbox
from ultraplane.operator.writers import ApiCalls, StatusWriters

from ultraplane.scheduling.decisions import Admitted, Replaced

log = logging.getLogger("ultraplane.operator")


class UltraServerViews:
    """Rounds of UltraServer status writes, at most one in flight."""

    def __init__(self, api: ApiCalls, cache: ObservationCache, outbox: Outbox,
                 writers: StatusWriters, *, clock: Callable[[], datetime],
                 seconds: float = 5.0) -> None:
        self.api = api
        self.cache = cache
        self.outbox = outbox
        self.writers = writers  # whose admissions in flight a view leaves out
        self.clock = clock
        self.wake = cache.wake
        self.seconds = seconds
        self.settle_seconds = seconds / 5  # see `flush`
        self.max_seconds = 3 * seconds
        self.written: dict[str, dict[str, Any]] = {}  # UltraServer -> its view as written
        self.gap = 0.0  # after the last round: `seconds` if it wrote, else the settle time
        self.touched: dict[str, float] = {}  # UltraServer -> when an admission last landed
        self.dirty: dict[str, float] = {}  # UltraServer -> since when its view is behind
        self._last = float("-inf")
        self._timer: asyncio.TimerHandle | None = None
        self._round: asyncio.Task[None] | None = None

    def found(self, name: str, status: Mapping[str, Any]) -> None:
        """What an earlier run wrote still stands: rewrite a view only when it changes (a
        restart would otherwise rewrite every UltraServer of the fleet at once)."""
        written = dict(status)
        if written:
            written.pop("heartbeatTime", None)
            written.setdefault("reservedFor", None)
            self.written[name] = written

    def landed(self, change: Admitted | Replaced) -> None:
        """An admission landed: its UltraServers' views wait for their figures to settle."""
        now = asyncio.get_running_loop().time()
        for placement in change.placements:
            for us in placement.ultraservers:
                self.touched[us] = now

    def start(self) -> None:
        """One round at a time, in the background. Rounds are `seconds` apart after one that
        wrote (so an UltraServer is written at most once per interval) and `settle_seconds`
        after one that only put writes off (see `flush`); a round that is not due yet is asked
        for once, by a timer."""
        loop = asyncio.get_running_loop()
        wait = self._last + self.gap - loop.time()
        if wait > 0:
            if self._timer is None or self._timer.when() <= loop.time():
                self._timer = loop.call_later(wait, self.wake.set)
            return
        if self._round is None or self._round.done():
            self._last = loop.time()
            self._round = asyncio.create_task(self.flush())

    async def round_written(self) -> None:
        if self._round is not None:
            await self._round

    async def flush(self) -> None:
        """Write allocated/free for every UltraServer whose figures changed (every replica of
        an InferenceJob counts; `jobs` names jobs, not replicas). A job whose admission is still
        being written is left out until it lands: the view follows what job statuses say.

        Why an UltraServer may be put off: in a burst of admissions its figures move with
        every few jobs, and a view rewritten each interval while it fills costs the API
        server a write per UltraServer per interval. So one whose last admission landed less
        than `us_settle_seconds` ago waits for a later round, unless its view has been behind
        for `us_max_seconds`: a filling UltraServer is written about once, when it is full."""
        report = self.cache.allocator.capacity()
        jobs_by_us: dict[str, set[str]] = {}
        servers_by_us: dict[str, set[str]] = {}
        unwritten: set[str] = set()
        for part, placement in self.cache.allocator.allocations().items():
            key = self.cache.owner(part)
            if key in self.writers.admitting:
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
            entry = self.cache.inventory.get(cap.name)
            if entry is None or cap.name in unwritten:  # the next round writes it
                continue
            status = statuses.ultraserver(cap, list(jobs_by_us.get(cap.name, ())), now)
            status["allocated"]["servers"] = len(servers_by_us.get(cap.name, ()))
            status["capacity"]["servers"] = entry.ultraserver.server_count
            status["reservedFor"] = self.outbox.reserved.get(cap.name)  # None: merge patch removes it
            compare = {k: v for k, v in status.items() if k != "heartbeatTime"}
            if self.written.get(cap.name) == compare:
                self.dirty.pop(cap.name, None)
                continue
            behind = mono - self.dirty.setdefault(cap.name, mono)
            if (mono - self.touched.get(cap.name, float("-inf")) < self.settle_seconds
                    and behind < self.max_seconds):
                put_off = True
                continue
            if log.isEnabledFor(logging.DEBUG):
                was = self.written.get(cap.name) or {}
                log.debug("UltraServer %s view: %s changed", cap.name,
                          [k for k in compare if compare[k] != was.get(k)])
            self.written[cap.name] = compare
            self.dirty.pop(cap.name, None)
            writes.append(self._write(cap.name, status))
        self.gap = self.seconds if writes else self.settle_seconds
        log.debug("UltraServer round: %d written, %s put off, %d with admissions in flight",
                  len(writes), put_off, len(unwritten))
        if put_off or unwritten:  # come back for them
            asyncio.get_running_loop().call_later(self.gap, self.wake.set)
        await asyncio.gather(*writes)

    async def _write(self, name: str, status: dict[str, Any]) -> None:
        status.pop("heartbeatTime", None)
        try:
            await self.api.call(self.api.kube.patch_ultraserver_status, name, status)
        except Exception as exc:
            log.debug("UltraServer %s status write failed: %s", name, exc)
            self.written.pop(name, None)
