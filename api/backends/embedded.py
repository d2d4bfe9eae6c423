"""The embedded backend: the core Scheduler and the simulator's JobRuntime in-process.

This is what `ultraplane serve` runs for a newcomer: no cluster, a fleet of
virtual UltraServers, jobs admitted by the same `ultraplane.scheduling.scheduler` cycle
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlmodel import Session
from ultraplane.api import store
from ultraplane.api.backends import (
    JobSpec,
    dryruns,
    not_found,
    pages,
    refuse_queue,
    scaled_spec,
)
from ultraplane.api.backends.arrivals import Arrivals
from ultraplane.api.backends.autoscalers import Autoscaler, Served, day_shape
from ultraplane.api.backends.embeddedjobs import JobState
from ultraplane.api.backends.executors import DecisionExecutor
from ultraplane.api.backends.fleets import FleetView, build_topology
from ultraplane.api.backends.heaps import Heap
from ultraplane.api.backends.histories import InferenceHistories, history_document
from ultraplane.api.backends.preemptionplans import Planners
from ultraplane.api.errors import ApiError
from ultraplane.api.schemas import (
    DryRunRequest,
    DryRunResult,
    JobKind,
    JobPage,
    JobResource,
    UltraServerView,
)
from ultraplane.api.settings import Settings
from ultraplane.api.store.accounting import day_of
from ultraplane.api.store.claims import Claim, check, describe, reason, unavailable
from ultraplane.api.store.groupcommits import GroupCommit
from ultraplane.api.ultraserverpatches import UltraServerPatch, patched
from ultraplane.simulator.runtime import JobRuntime

from ultraplane.documents.overrides import overridden_message
from ultraplane.ids import JobKey, local_ref, parse_chip_id
from ultraplane.placement.allocator import Allocator
from ultraplane.policies.budgetdocuments import budget_statuses, budget_wire
from ultraplane.policies.powerbook import PowerBook
from ultraplane.policies.queuedocuments import queue_statuses, queue_wire
from ultraplane.policies.quotas import QuotaBook
from ultraplane.resources import InferenceJobSpec
from ultraplane.scheduling.admissions import Admissions

log = logging.getLogger("ultraplane.api.embedded")

# Running jobs sampled per hold of the fleet lock in a tick (see `tick`).
SAMPLE_CHUNK = 64
# The least time from one background tick to the next, however often creates wake it: a tick
# samples every running job and saves, so a stream of submits woke one per create, and the
# ticks took the CPU the requests needed. A burst of creates is one tick, a little later.
TICK_GAP_S = 0.05
NAME_STRIPES = 64


class EmbeddedBackend:
    """Fleet, queue and runtime in this process; the SQL store is the memory across restarts."""

    name = "embedded"

    def __init__(
        self, settings: Settings, engine: Engine, *, clock: Callable[[], float] = time.time,
        background: bool = True,
    ) -> None:
        self.settings = settings
        self.background = background  # False: ticks run only when tick() is called
        self.engine = engine
        self.clock = clock
        self.lock = threading.RLock()
        self.topology, preset = build_topology(settings)
        self.allocator = Allocator(self.topology)
        # Tenant queues (--queues FILE): the core's book decides quotas, borrowing and reclaim
        self.quotas = QuotaBook(Settings.read_queues(settings.queues) if settings.queues else [],
                                Settings.read_cohorts(settings.queues) if settings.queues else [])
        # Power budgets (--power-budgets FILE): the core's book admits within headroom, caps
        self.power = PowerBook(Settings.read_budgets(settings.power_budgets)
                               if settings.power_budgets else [])
        self.admissions = Admissions(self.allocator, quotas=self.quotas, power=self.power)
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
        self.runner = DecisionExecutor(self)
        self.arrivals = Arrivals()  # creates in flight: their jobs are queued in creation order
        self.planners = Planners(budget_s=settings.dry_run_plan_seconds)
        self.fleet = FleetView(self.topology, self.allocator, preset)
        # Each serving InferenceJob's recent figures (the dashboard's chart, the metrics)
        self.histories = InferenceHistories()
        self.services: list[dict[str, Any]] = []
        self._wake = threading.Event()
        self._heap = Heap()  # the background loop's: full collections out of requests
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
        # Create, delete and re-create of one name run one at a time, from the check of the
        # name through the commit to the change in memory. Striped, not one lock per name:
        # a bounded set, and two names sharing a stripe only wait for each other's commit.
        self._name_locks = [threading.Lock() for _ in range(NAME_STRIPES)]
        # SQLite lets one writer in at a time and makes the others poll, sleeping up to 100 ms
        # between tries, so concurrent creates waited for each other's commits in steps of
        # tens of milliseconds. This process's writers (creates, deletes, the tick's persist)
        # queue on a lock instead, each let in as soon as the one before it has committed,
        # and the creates waiting together commit together (ultraplane.api.store.groupcommits).
        self._writes = threading.Lock()
        self._inserts = GroupCommit(self._writes, engine.begin)
        self.claim = Claim(engine)  # one live server per store (StoreError if another has it)
        try:
            check(engine)  # corrupt, read-only or full: one sentence now, not a traceback later
        except BaseException:
            self.claim.release()
            raise
        # Autoscaled InferenceJobs: the trace's load, sized by the core's planner (autoscalers)
        trace = settings.inference_trace
        self.autoscaler = Autoscaler(
            (lambda: Settings.read_trace(trace)) if trace else day_shape,
            rate_scale=settings.inference_rate_scale, every_s=settings.autoscale_seconds)
        self.demo: Any = None
        if settings.demo:
            from ultraplane.api.backends.demos import DemoStream

            self.demo = DemoStream(self, seed=settings.demo_seed)

    # -- simulated clock -------------------------------------------------------------------
    def _load_clock(self, session: Session) -> None:
        epoch = store.get_value(session, key="sim_epoch_s")
        elapsed = store.get_value(session, key="sim_elapsed_s")
        self.sim_epoch = float(epoch) if epoch is not None else self.clock()
        self.sim_elapsed_base = float(elapsed) if elapsed is not None else 0.0
        self.wall0 = self.clock()
        # The tick saves next_seq; a create's row may be newer than the last tick.
        self.next_seq = max([int(store.get_value(session, key="next_seq") or 0),
                             *(j.seq for j in self.jobs.values())])

    def sim_now(self) -> float:
        """Simulated time as unix seconds: accounting days follow the simulated calendar."""
        return self.sim_epoch + self.sim_elapsed_base + (self.clock() - self.wall0) * (
            self.settings.time_scale
        )

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, *, background: bool | None = None) -> None:
        if background is None:
            background = self.background
        if self._started:
            return
        self._started = True
        with Session(self.engine) as session, self.lock:
            tombstones = []
            for row in store.list_jobs(session):
                if row.status.get("status", {}).get("phase") == "Deleted":
                    tombstones.append(row.uid)  # left by earlier versions: never requeued
                    continue
                self.register(JobState.from_row(row))
            if tombstones:
                with self.engine.begin() as conn:
                    store.write_jobs(conn, rows=[], removed=tombstones)
            self._load_clock(session)
            self.runner.recover(self.sim_now())
        try:
            self.tick()
        except SQLAlchemyError as exc:  # serve what was loaded; /readyz says why not ready
            self._last_error = f"{describe(self.engine.url)} did not save: {reason(exc)}"
            log.warning("%s", self._last_error)
        if background:
            self._thread = threading.Thread(target=self._loop, name="ultraplane-tick", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._heap.release()
        try:
            self.persist(force=True)
        except SQLAlchemyError as exc:  # what is kept stays kept; say what was not
            log.error("the last save before stopping failed: %s", reason(exc))
        finally:
            self.claim.release()

    def ready(self) -> tuple[bool, str]:
        if self._ticks == 0:
            return False, "the first scheduling cycle has not run yet"
        return (not self._last_error), self._last_error

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.settings.tick_seconds)
            if self._stop.wait(min(TICK_GAP_S, self.settings.tick_seconds)):
                break
            self._wake.clear()
            try:
                self.tick()
                self._last_error = ""
                self._heap.settle()
            except SQLAlchemyError as exc:  # kept in memory, saved by the next tick that can
                self._last_error = (f"{describe(self.engine.url)} did not save the last "
                                    f"changes: {reason(exc)}")
                log.warning("%s", self._last_error)
            except Exception as exc:  # keep serving; /readyz reports it
                log.exception("tick failed")
                self._last_error = f"tick failed: {exc}"

    def tick(self) -> None:
        """One step: runtime events, a scheduling cycle, progress, demo jobs; then persist."""
        with self.lock:
            now = self.sim_now()
            events = self.runner.advance(now)
            live = list(self.live.values())
        # Every running job's progress, a chunk at a time: with a thousand jobs running, one
        # hold for all of them kept every other request waiting about 150 ms each tick. A job
        # deleted meanwhile is skipped; one created meanwhile is sampled from the next tick.
        for first in range(0, len(live), SAMPLE_CHUNK):
            with self.lock:
                for job in live[first:first + SAMPLE_CHUNK]:
                    if self.live.get(job.uid) is job:
                        self.runner.sample(job, now)
            time.sleep(0)  # the GIL to a request waiting for the lock, before the next chunk
        with self.lock:
            self.runner.decide(now, events=events)
            self._holders_view = None
            self._sample_services(now)
            if self.demo is not None:
                self.demo.step(now)
            # Only a job starting or stopping, or a power cap, changes chips or per-chip power.
            capped = self.power.active and self.runner.power(now)
            if capped or self._fleet_stale or self.reserved != self.fleet.reserved():
                self._refresh_fleet()
            else:
                self.fleet.energy_kwh = float(self.runtime.fleet().energy_kwh)
            self._ticks += 1
            served = [Served(j.uid, j.namespace, j.name, cast(InferenceJobSpec, j.spec),
                             j.created_s, int(j.status.get("replicas") or 0))
                      for j in self.live.values()
                      if j.kind == "InferenceJob" and getattr(j.spec, "autoscaling", None)]
        # outside the fleet lock: a new count goes through scale_job, which takes it itself
        self.autoscaler.step(now, served, self)
        self.persist()

    def write_load(self, uid: str, status: dict[str, Any], *, keep_message: bool) -> None:
        """The planner's step into a job's status (saved by the next persist)."""
        with self.lock:
            job = self.jobs.get(uid)
            if job is None or not job.running:
                return
            if keep_message:
                status = {k: v for k, v in status.items() if k != "scalingMessage"}
            job.status.update(status)
            self.touched(job)

    def _sample_services(self, now: float) -> None:
        """The running InferenceJobs' figures into their histories (state lock held)."""
        self.services = self.histories.observe_jobs(now, (
            {"metadata": {"uid": j.uid, "namespace": j.namespace, "name": j.name},
             "spec": j.spec_wire, "status": j.status}
            for j in self.live.values() if j.kind == "InferenceJob"))

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

    def forget(self, job: JobState, *, row_deleted: bool = False) -> None:
        """Drop a job from memory; its row goes at the next persist (unless a delete has
        already committed that), its accounting stays, closed at the next persist."""
        record, days = self.runner.accounting_of(job)
        if row_deleted:  # accounting outlives the job and says how it ended
            record = record.model_copy(update={"phase": "Deleted"})
        else:
            self._removed.add(job.uid)
        self._final.append((record, days))
        del self.jobs[job.uid]
        self.histories.forget(job.uid)
        self._names.pop((job.kind, job.namespace, job.name), None)
        self.runner.unindex(job)
        self._changed.pop(job.uid, None)
        if self.live.pop(job.uid, None) is not None:
            self._fleet_stale = True
        self._cycle_due = True

    @contextmanager
    def _writing(self) -> Iterator[Connection]:
        """One write transaction, after this process's writes before it (see `_writes`)."""
        with self._writes, self.engine.begin() as conn:
            yield conn

    def persist(self, *, force: bool = False) -> None:
        """Save changed jobs at once, running jobs' progress and accounting every few seconds.

        The snapshot is taken under the state lock and written outside it, so requests
        are not blocked by the database; `_persist_lock` keeps writes in snapshot order
        (and a delete's commit out of the middle of one). What a failed write held is
        handed back, to be written by the next persist: nothing is marked saved before
        its transaction commits. Raises the store's error after handing back.
        Never call with the state lock held (lock order: persist, then state).
        """
        with self._persist_lock:
            with self.lock:
                wall = self.clock()
                periodic = force or wall - self._last_persist >= (
                    self.settings.accounting_interval_seconds)
                pool = {**self._changed, **self.live} if periodic else self._changed
                changed = list(pool.values())
                # copies, cheap to take: the rows are built from them outside the lock
                copies = [j.snapshot() for j in changed]
                final, self._final = self._final, []
                for job in changed:
                    job.dirty = False
                    self._changed.pop(job.uid, None)
                removed = sorted(self._removed)
                self._removed.clear()
                values: dict[str, str] = {}
                if str(self.next_seq) != self._saved_seq:
                    values["next_seq"] = str(self.next_seq)
                if periodic:
                    values["sim_epoch_s"] = repr(self.sim_epoch)
                    values["sim_elapsed_s"] = repr(self.sim_now() - self.sim_epoch)
            rows = [j.to_values() for j in copies]
            records = [self.runner.accounting_of(j) for j in copies] + final
            if not (rows or records or removed or values):
                return
            try:
                with self._writing() as conn:
                    store.write_jobs(conn, rows=rows, removed=removed)
                    store.write_accounting(conn, records=records)
                    store.write_values(conn, values=values)
            except SQLAlchemyError:
                with self.lock:
                    for job in changed:
                        if self.jobs.get(job.uid) is job:
                            job.dirty = True
                            self._changed[job.uid] = job
                    self._final = final + self._final
                    self._removed.update(removed)
                raise
            if "next_seq" in values:
                self._saved_seq = values["next_seq"]
            if periodic:
                self._last_persist = wall

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
            summary = self.fleet.summary(self.jobs)
            summary["inference"] = list(self.services)
        summary["queues"] = [{"name": q["metadata"]["name"], **q["status"]}
                             for q in self.tenant_queues()]
        summary["budgets"] = [{"name": b["metadata"]["name"], "watts": b["spec"]["watts"],
                               **b["status"]} for b in self.power_budgets()]
        return summary

    def power_budgets(self) -> list[dict[str, Any]]:
        """Every budget of `--power-budgets`, its spec and what the core predicts and caps."""
        with self.lock:
            statuses = budget_statuses(self.power)
            return [{"apiVersion": "ultraplane.dev/v1alpha1", "kind": "PowerBudget",
                     "metadata": {"name": name}, "spec": budget_wire(spec),
                     "status": statuses[name]}
                    for name, spec in sorted(self.power.specs.items())]

    def tenant_queues(self) -> list[dict[str, Any]]:
        """Every queue of `--queues`, its spec and what the core counts against it now."""
        if not self.quotas.active:  # (every /metrics scrape asks)
            return []
        with self.lock:
            statuses = queue_statuses(self.quotas, self.admissions.waiting(),
                                      self.admissions.running().values())
        return [{"apiVersion": "ultraplane.dev/v1alpha1", "kind": "TenantQueue",
                 "metadata": {"name": name}, "spec": queue_wire(spec), "status": statuses[name]}
                for name, spec in sorted(self.quotas.queues.items())]

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
        # The scan of a deep queue runs on a copy of the job list (one C-level copy under the
        # lock): kind, namespace and seq never change, so only the page's own `limit`
        # resources are rendered with the lock held again.
        with self.lock:
            everyone = list(self.jobs.values())
        jobs = heapq.nsmallest(limit + 1, (
            j for j in everyone
            if j.seq > after and j.kind == kind and (namespace is None or j.namespace == namespace)
        ), key=lambda j: j.seq)
        with self.lock:
            items = [j.resource() for j in jobs[:limit]]
        more = len(jobs) > limit
        return JobPage(items=items, next=pages.token_after(jobs[limit - 1].seq) if more else None)

    def get_job(self, kind: JobKind, namespace: str, name: str) -> JobResource:
        with self.lock:
            return self._find(kind, namespace, name).resource()

    def inference_history(self, namespace: str, name: str) -> dict[str, Any]:
        """An InferenceJob's samples (`histories`), the figures of now included."""
        with self.lock:
            job = self._find("InferenceJob", namespace, name)
            self.histories.observe(job.uid, self.sim_now(), job.status, job.spec_wire)
            wire = {"metadata": {"name": name, "namespace": namespace, "uid": job.uid},
                    "spec": job.spec_wire}
        return history_document(wire, self.histories.series(job.uid))

    # -- writes ----------------------------------------------------------------------------
    def _name_lock(self, kind: str, namespace: str, name: str) -> threading.Lock:
        return self._name_locks[hash((kind, namespace, name)) % NAME_STRIPES]

    def create_job(
        self, kind: JobKind, namespace: str, name: str, spec: JobSpec, labels: dict[str, str]
    ) -> JobResource:
        """Commit the job's row, then queue it: the 201 follows the commit, and a failed
        commit (503) leaves nothing in memory. The fleet lock is not held over the write."""
        with self._name_lock(kind, namespace, name):
            with self.lock:
                if self._names.get((kind, namespace, name)) is not None:
                    raise already_exists(kind, namespace, name)
                self.next_seq += 1
                seq, now = self.next_seq, self.sim_now()
                self.arrivals.expect(seq)
            try:
                job = JobState(uid=str(uuid.uuid4()), kind=kind, namespace=namespace, name=name,
                               spec=spec, seq=seq, created_s=now, labels=labels, dirty=False)
                resource = self._insert(job)
            except BaseException:
                with self.lock:
                    self.queue_created(seq, None)
                raise
            with self.lock:
                self.register(job)
                self.queue_created(seq, job)
        self._wake.set()
        return resource

    def _insert(self, job: JobState) -> JobResource:
        """Commit a new job's row; its resource as created, or the create's error."""
        kind, namespace, name = job.kind, job.namespace, job.name
        # Everything derived from the spec is built before anything is written or
        # registered, so a spec that cannot be read fails here and leaves no trace.
        _ = job.queued, job.requests, job.priority, job.preemptible
        refuse_queue(self.quotas.queues, namespace, job.spec.queue_name, job.priority)
        row, resource = job.to_values(), job.resource()
        try:
            self._inserts.insert(row)
        except IntegrityError as exc:
            raise already_exists(kind, namespace, name) from exc
        except SQLAlchemyError as exc:
            log.warning("create of %s %s/%s not saved: %s", kind, namespace, name, reason(exc))
            raise unavailable(self.engine.url, exc) from exc
        return resource

    def queue_created(self, seq: int, job: JobState | None) -> None:
        """The create of `seq` registered `job` (None: it failed): queue the jobs whose turn
        has come, in creation order (state lock held; see `ultraplane.api.backends.arrivals`).
        One deleted meanwhile is not queued."""
        for ready in self.arrivals.arrived(seq, job):
            if self.jobs.get(ready.uid) is ready:
                self.runner.submit(ready)

    def delete_job(self, kind: JobKind, namespace: str, name: str) -> JobResource:
        """Delete the job's row, then stop it and free its chips: the 200 follows the
        commit, and a failed commit (503) leaves the job running as it was.

        The persist lock is held from the commit to the change in memory, so no tick
        snapshot taken before the change is written after the delete (and brings the row
        back)."""
        with self._name_lock(kind, namespace, name), self._persist_lock:
            with self.lock:
                job = self._find(kind, namespace, name)
                # its accounting as of the last sample, closed in the same transaction; the
                # few seconds since then follow with the next persist
                record, days = self.runner.accounting_of(job)
            try:
                with self._writing() as conn:
                    store.write_jobs(conn, rows=[], removed=[job.uid])
                    store.write_accounting(conn, records=[
                        (record.model_copy(update={"phase": "Deleted"}), days)])
            except SQLAlchemyError as exc:
                log.warning("delete of %s %s/%s not saved: %s", kind, namespace, name,
                            reason(exc))
                raise unavailable(self.engine.url, exc) from exc
            with self.lock:
                if self.jobs.get(job.uid) is job:  # the demo stream may have let it go
                    self.runner.remove(job, self.sim_now())
                    self.forget(job, row_deleted=True)
                    self._holders_view = None
                    self._refresh_fleet()
                return job.resource()

    def scale_job(self, namespace: str, name: str, replicas: int, *,
                  planned: bool = False) -> JobResource:
        """Commit the job's new spec.replicas, then hand it to the core (`Admissions.rescale`
        through the executor): the 200 follows the commit, and a failed commit (503) leaves
        the job as it was. A finished job cannot be scaled (409). A count not `planned` by
        the fleet's planner on an autoscaled job is applied and marked as an override."""
        kind: JobKind = "InferenceJob"
        with self._name_lock(kind, namespace, name), self._persist_lock:
            with self.lock:
                job = self._find(kind, namespace, name)
                if job.finished:
                    raise ApiError(409, "Conflict", "spec.replicas",
                                   f"InferenceJob {namespace}/{name} is {job.phase}: a finished "
                                   "job cannot be scaled")
                spec = scaled_spec(cast(InferenceJobSpec, job.spec), replicas)
                if spec.replicas == cast(InferenceJobSpec, job.spec).replicas:
                    return job.resource()
                row = job.snapshot()
            row.respec(spec)
            try:
                with self._writing() as conn:
                    store.write_jobs(conn, rows=[row.to_values()], removed=[])
            except SQLAlchemyError as exc:
                log.warning("scale of %s/%s not saved: %s", namespace, name, reason(exc))
                raise unavailable(self.engine.url, exc) from exc
            with self.lock:
                if self.jobs.get(job.uid) is job:
                    job.respec(spec)
                    said = "" if planned or spec.autoscaling is None else overridden_message(
                        replicas)
                    self.runner.rescale(job, self.sim_now(), said)
                    self._cycle_due = True
                    self._holders_view = None
                    self._refresh_fleet()
                resource = job.resource()
        self._wake.set()
        return resource

    def fail_chip(self, chip_id: str) -> list[str]:
        """Break one chip (chaos drills, tests): as `PATCH /v1/ultraservers/{name}` would.
        Returns the jobs that held it."""
        us_name, server, chip = parse_chip_id(chip_id)
        with self.lock:
            us = self.allocator.topology.ultraserver(us_name)
            holder = self.allocator.job_of(chip_id)
            refs = sorted(us.failed_chips | {local_ref(server, chip)})
        self.patch_ultraserver(us_name, UltraServerPatch.model_validate(
            {"spec": {"failedChips": refs}}))
        return [] if holder is None else [self.admissions.owner(holder)]

    def patch_ultraserver(self, name: str, patch: UltraServerPatch) -> UltraServerView:
        """Failed chips and cordons of one UltraServer: the allocator adopts them, and the core
        decides what each job on a newly failed chip becomes (its failure policy)."""
        with self.lock:
            if name not in self.allocator.topology:
                raise ApiError(404, "NotFound", "name", f"UltraServer {name} does not exist")
            before = self.allocator.topology.ultraserver(name)
            after = patched(before, patch)
            self.allocator.upsert_ultraserver(after)
            self.runner.health_changed(before, after, self.sim_now())
            self.fleet.topology = self.allocator.topology
            self._cycle_due = True
            self._holders_view = None
            self._refresh_fleet()
            view = next(v for v in self.fleet.ultraservers if v.name == name)
        self.persist()  # the jobs it changed are saved before the answer
        self._wake.set()
        return view

    def dry_run_nowait(self, request: DryRunRequest) -> DryRunResult | None:
        """The dry run if the fleet lock is free right now and no preemption plan is needed,
        else None (the caller then calls `dry_run` in a worker thread)."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            running, _ = self._holders()
            result = dryruns.place(self.allocator, request, reservation=self.reservation)
        finally:
            self.lock.release()
        return None if dryruns.needs_plan(result, request, running) else result

    def _holders(self) -> tuple[dict[JobKey, int], dict[str, str]]:
        """(preemptible holder key -> priority, holder key -> namespace/name), rebuilt only
        when chips changed hands (a tick, a delete): a dry run must not scan the queue."""
        if self._holders_view is None:
            held = [j for j in self.live.values() if j.held]
            running = {JobKey(key): j.priority for j in held if j.preemptible for key in j.held}
            owners = {key: f"{j.namespace}/{j.name}" for j in held for key in j.held}
            self._holders_view = (running, owners)
        return self._holders_view

    def dry_run(self, request: DryRunRequest, *, wait: bool = True) -> DryRunResult:
        """Placement under the lock; a preemption plan on a copy, after the lock is released,
        bounded in time and in how many run at once (503 with Retry-After past either).
        A plan that finds the planners busy waits for them (without the lock) once."""
        with self.lock:
            running, owners = self._holders()
            result = dryruns.place(self.allocator, request, reservation=self.reservation)
            if not dryruns.needs_plan(result, request, running):
                return result
            quick = dryruns.plan_inline(self.allocator, request, running=running,
                                        reservation=self.reservation)
            if quick is not None:
                return dryruns.with_plan(result, quick, lambda key: owners.get(key, key))
            plan = None
            if self.planners.claim():
                try:
                    plan = dryruns.pending(self.allocator, request, running=running,
                                           reservation=self.reservation, planners=self.planners)
                except BaseException:
                    self.planners.release()
                    raise
        if plan is None:
            if wait and self.planners.wait_free(self.planners.budget_s):
                return self.dry_run(request, wait=False)  # the fleet may have changed: anew
            raise dryruns.busy("another preemption plan is being computed; ask again shortly")
        try:
            return dryruns.preempt(result, request, plan, job_name=lambda key: owners.get(key, key),
                                   planners=self.planners)
        finally:
            self.planners.release()

    def explain_job(self, kind: JobKind, namespace: str, name: str,
                    visible: Callable[[str], bool]) -> dict[str, Any]:
        """`why`: the core's explanation (ultraplane.documents.explanations) over this fleet's scheduler
        state: the job's queue entry, the UltraServer views and the running jobs, at sim time."""
        from ultraplane.documents.explanation_inputs import explain_documents

        with self.lock:
            job = self._find(kind, namespace, name).resource().model_dump(by_alias=True)
            holders = [j.resource().model_dump(by_alias=True) for j in self.live.values()]
            views = [v.model_dump(by_alias=True) for v in self.fleet.ultraservers]
            now = self.sim_now()
        return explain_documents(job, views, holders, now_s=now, visible=visible).wire()

    def day(self, t_s: float) -> str:
        return day_of(t_s)


def already_exists(kind: str, namespace: str, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", "metadata.name", f"{kind} {namespace}/{name} already exists")
