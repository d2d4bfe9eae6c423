"""The embedded backend: the core Scheduler and the simulator's JobRuntime in-process.

This is what `ultraplane serve` runs for a newcomer: no cluster, a fleet of
virtual UltraServers, jobs admitted by the same `ultraplane.scheduling` cycle
the operator uses and executed by the same runtime the simulator uses. A
background thread ticks (advance the runtime, run a cycle, sample progress,
persist). Jobs, their chips and the simulated clock are saved in the store, so
a restart re-adopts running jobs on their chips and resumes them from their
last checkpoint, as a real cluster would after a control-plane restart.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine
from sqlmodel import Session
from ultraplane.api import pages, store
from ultraplane.api.accounting import day_of
from ultraplane.api.backends import JobSpec, not_found
from ultraplane.api.dryruns import dry_run
from ultraplane.api.errors import ApiError
from ultraplane.api.fleets import FleetView, build_topology
from ultraplane.api.jobruns import JobRunner
from ultraplane.api.jobstates import JobState
from ultraplane.api.schemas import (
    DryRunRequest,
    DryRunResult,
    JobKind,
    JobPage,
    JobResource,
    UltraServerView,
)
from ultraplane.api.settings import Settings
from ultraplane.simulator.runtime import JobRuntime

from ultraplane.admissions import Admissions
from ultraplane.allocator import Allocator
from ultraplane.ids import ChipId, JobKey

log = logging.getLogger("ultraplane.api.embedded")


class EmbeddedBackend:
    """Fleet, queue and runtime in this process; the SQL store is the memory across restarts."""

    name = "embedded"

    def __init__(
        self, settings: Settings, engine: Engine, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.clock = clock
        self.lock = threading.RLock()
        self.topology, preset = build_topology(settings)
        self.allocator = Allocator(self.topology)
        self.admissions = Admissions(self.allocator)
        self.scheduler = self.admissions.scheduler
        self.reserved: dict[str, JobKey] = {}  # UltraServer -> job held back for (last cycle)
        self.reservation: tuple[tuple[str, ...], int] | None = None  # (UltraServers, priority)
        self.runtime = JobRuntime(self.topology, clock=clock, time_scale=settings.time_scale)
        self.jobs: dict[str, JobState] = {}  # uid -> state
        # (kind, namespace, name) -> uid: requests find a job without a scan of the queue
        self._names: dict[tuple[str, str, str], str] = {}
        # Indexes that keep a tick from scanning a deep queue: jobs changed since the last
        # persist, and jobs running (the only ones holding chips or drawing power).
        self._changed: dict[str, JobState] = {}
        self.live: dict[str, JobState] = {}
        self._fleet_stale = True  # a job started or stopped (or no view yet): refresh the views
        self._cycle_due = True  # set by anything that can change the next cycle's decisions
        self._holders_view: tuple[dict[JobKey, int], dict[str, str]] | None = None
        self.runner = JobRunner(self)
        self.fleet = FleetView(self.topology, self.allocator, preset)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_error = ""
        self._ticks = 0
        self._started = False
        self._last_persist = 0.0
        self._persist_lock = threading.Lock()
        self._removed: set[str] = set()
        self._final: list[Any] = []
        self._saved_seq: str | None = None
        self.demo: Any = None
        if settings.demo:
            from ultraplane.api.demos import DemoStream

            self.demo = DemoStream(self, seed=settings.demo_seed)

    # -- simulated clock -------------------------------------------------------------------
    def _load_clock(self, session: Session) -> None:
        epoch = store.get_value(session, key="sim_epoch_s")
        elapsed = store.get_value(session, key="sim_elapsed_s")
        self.sim_epoch = float(epoch) if epoch is not None else self.clock()
        self.sim_elapsed_base = float(elapsed) if elapsed is not None else 0.0
        self.wall0 = self.clock()
        self.next_seq = int(store.get_value(session, key="next_seq") or 0)

    def sim_now(self) -> float:
        """Simulated time as unix seconds: accounting days follow the simulated calendar."""
        return self.sim_epoch + self.sim_elapsed_base + (self.clock() - self.wall0) * (
            self.settings.time_scale
        )

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, *, background: bool = True) -> None:
        if self._started:
            return
        self._started = True
        with Session(self.engine) as session, self.lock:
            self._load_clock(session)
            for row in store.list_jobs(session):
                self.register(JobState.from_row(row))
            self.runner.recover(self.sim_now())
        self.tick()
        if background:
            self._thread = threading.Thread(target=self._loop, name="ultraplane-tick", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.persist(force=True)

    def ready(self) -> tuple[bool, str]:
        if self._ticks == 0:
            return False, "the first scheduling cycle has not run yet"
        return (not self._last_error), self._last_error

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.settings.tick_seconds)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self.tick()
                self._last_error = ""
            except Exception as exc:  # keep serving; /readyz reports it
                log.exception("tick failed")
                self._last_error = f"tick failed: {exc}"

    def tick(self) -> None:
        """One step: runtime events, a scheduling cycle, progress, demo jobs; then persist."""
        with self.lock:
            now = self.sim_now()
            self.runner.step(now)
            self._holders_view = None
            if self.demo is not None:
                self.demo.step(now)
            # Only a job starting or stopping changes chips or per-chip power.
            if self._fleet_stale or self.reserved != self.fleet.reserved():
                self._refresh_fleet()
            else:
                self.fleet.energy_kwh = float(self.runtime.fleet().energy_kwh)
            self._ticks += 1
        self.persist()

    def _refresh_fleet(self) -> None:
        self.fleet.refresh(self.live, self.runtime, self.reserved)
        self._fleet_stale = False

    def register(self, job: JobState) -> None:
        """Keep a job in memory (state lock held), findable by kind, namespace and name."""
        self.jobs[job.uid] = job
        self._names[(job.kind, job.namespace, job.name)] = job.uid
        self.runner.index(job)
        self.touched(job, dirty=job.dirty)
        self._cycle_due = True

    def touched(self, job: JobState, *, dirty: bool = True) -> None:
        """A job's status changed (state lock held): save it at the next persist, and keep the
        index of running jobs in step with its phase."""
        if dirty:
            job.dirty = True
            self._changed[job.uid] = job
        if job.running != (job.uid in self.live):
            self._fleet_stale = True
            if job.running:
                self.live[job.uid] = job
            else:
                del self.live[job.uid]

    def cycle_due(self, *, changed: bool) -> bool:
        """Whether this tick needs a scheduling cycle (state lock held): only if a job came or
        went, a runtime event (finish, chip failure) happened, or the fleet changed."""
        due, self._cycle_due = self._cycle_due or changed, False
        return due

    def forget(self, job: JobState) -> None:
        """Drop a job from memory; its row goes at the next persist, its accounting stays."""
        self._final.append(self.runner.accounting_of(job))
        self._removed.add(job.uid)
        del self.jobs[job.uid]
        self._names.pop((job.kind, job.namespace, job.name), None)
        self.runner.unindex(job)
        self._changed.pop(job.uid, None)
        if self.live.pop(job.uid, None) is not None:
            self._fleet_stale = True
        self._cycle_due = True

    def persist(self, *, force: bool = False, only: list[JobState] | None = None) -> None:
        """Save changed jobs at once, running jobs' progress and accounting every few seconds.

        The snapshot is taken under the state lock and written outside it, so requests
        are not blocked by the database; `_persist_lock` keeps writes in snapshot order.
        Never call with the state lock held (lock order: persist, then state).
        `only`: a request's own jobs, saved without a scan of every job (the tick saves the rest).
        """
        with self._persist_lock:
            with self.lock:
                wall = self.clock()
                periodic = force or (only is None and wall - self._last_persist >= (
                    self.settings.accounting_interval_seconds
                ))
                if only is None:
                    pool = {**self._changed, **self.live} if periodic else self._changed
                    changed = list(pool.values())
                else:
                    changed = [j for j in only if j.dirty]
                rows = [j.to_values() for j in changed]
                records = [self.runner.accounting_of(j) for j in changed] + self._final
                for job in changed:
                    job.dirty = False
                    self._changed.pop(job.uid, None)
                removed, self._final = sorted(self._removed), []
                self._removed.clear()
                values: dict[str, str] = {}
                if str(self.next_seq) != self._saved_seq:
                    values["next_seq"] = self._saved_seq = str(self.next_seq)
                if periodic:
                    self._last_persist = wall
                    values["sim_epoch_s"] = repr(self.sim_epoch)
                    values["sim_elapsed_s"] = repr(self.sim_now() - self.sim_epoch)
            if not (rows or records or removed or values):
                return
            with self.engine.begin() as conn:
                store.write_jobs(conn, rows=rows, removed=removed)
                store.write_accounting(conn, records=records)
                store.write_values(conn, values=values)

    # -- reads -----------------------------------------------------------------------------
    def ultraservers(self) -> list[UltraServerView]:
        return self.fleet.ultraservers

    def capacity(self) -> dict[str, Any]:
        return self.fleet.capacity

    def ultraservers_json(self) -> bytes:
        return self.fleet.ultraservers_json

    def capacity_json(self) -> bytes:
        return self.fleet.capacity_json

    def fleet_summary(self) -> dict[str, Any]:
        with self.lock:
            return self.fleet.summary(self.jobs)

    def _find(self, kind: JobKind, namespace: str, name: str) -> JobState:
        job = self.jobs.get(self._names.get((kind, namespace, name), ""))
        if job is None:
            raise not_found(kind, namespace, name)
        return job

    def list_jobs(
        self, kind: JobKind, namespace: str | None, *, limit: int, cont: str | None
    ) -> JobPage:
        """Jobs in submission order, `limit` at a time; `cont` is the last page's token."""
        after = pages.seq_after(cont)
        with self.lock:
            jobs = heapq.nsmallest(limit + 1, (
                j for j in self.jobs.values()
                if j.seq > after and j.kind == kind
                and (namespace is None or j.namespace == namespace)
            ), key=lambda j: j.seq)
            items = [j.resource() for j in jobs[:limit]]
        more = len(jobs) > limit
        return JobPage(items=items, next=pages.token_after(jobs[limit - 1].seq) if more else None)

    def get_job(self, kind: JobKind, namespace: str, name: str) -> JobResource:
        with self.lock:
            return self._find(kind, namespace, name).resource()

    # -- writes ----------------------------------------------------------------------------
    def create_job(
        self, kind: JobKind, namespace: str, name: str, spec: JobSpec, labels: dict[str, str]
    ) -> JobResource:
        with self.lock:
            try:
                self._find(kind, namespace, name)
            except ApiError:
                pass
            else:
                raise ApiError(
                    409, "AlreadyExists", "metadata.name",
                    f"{kind} {namespace}/{name} already exists",
                )
            self.next_seq += 1
            job = JobState(
                uid=str(uuid.uuid4()), kind=kind, namespace=namespace, name=name, spec=spec,
                seq=self.next_seq, created_s=self.sim_now(), labels=labels,
            )
            self.register(job)
            self.runner.submit(job)
            resource = job.resource()
        self.persist(only=[job])
        self._wake.set()
        return resource

    def delete_job(self, kind: JobKind, namespace: str, name: str) -> JobResource:
        with self.lock:
            job = self._find(kind, namespace, name)
            self.runner.remove(job, self.sim_now())
            self.forget(job)
            self._holders_view = None
            self._refresh_fleet()
            resource = job.resource()
        self.persist(only=[])
        return resource

    def fail_chip(self, chip_id: str) -> list[str]:
        """Break a chip: the allocator stops using it, jobs on it restart from a checkpoint
        (or fail, per their failurePolicy) at the next tick. For chaos drills and tests."""
        with self.lock:
            self._cycle_due = True
            self.allocator.set_chip_failed(ChipId(chip_id), True)
            return self.runtime.fail_chip(chip_id)

    def dry_run_nowait(self, request: DryRunRequest) -> DryRunResult | None:
        """The dry run if the fleet lock is free right now, else None (caller waits elsewhere)."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            return self.dry_run(request)
        finally:
            self.lock.release()

    def _holders(self) -> tuple[dict[JobKey, int], dict[str, str]]:
        """(preemptible holder key -> priority, holder key -> namespace/name), rebuilt only
        when chips changed hands (a tick, a delete): a dry run must not scan the queue."""
        if self._holders_view is None:
            held = [j for j in self.live.values() if j.held]
            running = {JobKey(key): j.priority for j in held if j.preemptible for key in j.held}
            owners = {key: f"{j.namespace}/{j.name}" for j in held for key in j.held}
            self._holders_view = (running, owners)
        return self._holders_view

    def dry_run(self, request: DryRunRequest) -> DryRunResult:
        with self.lock:
            running, owners = self._holders()
            return dry_run(
                self.allocator, request, running=running,
                job_name=lambda key: owners.get(key, key), reservation=self.reservation,
            )

    def day(self, t_s: float) -> str:
        return day_of(t_s)
