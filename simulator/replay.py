"""Offline trace replay: jobs arrive, queue, run on virtual chips and finish, as fast as possible.

Why it goes through `ultraplane.scheduling.scheduler.Scheduler` and the core `Allocator`:
the replay is a "what if" study of the real placement policy, so it must admit
jobs in the operator's order with the operator's allocator, only in simulated
time. The loop pops one instant at a time from the event heap, applies ends,
faults and arrivals, then runs one admission cycle if anything changed.

Work is counted in "ideal seconds": a trace duration is taken as the run time at
the tightest placement the job's size allows; a wider spread stretches it
(`models.spread_slowdown`), checkpoints add their cost, and a fault or a
preemption loses everything since the last checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ultraplane.simulator.backlogs import Backlog
from ultraplane.simulator.checkpoints import checkpointed_s, checkpoints_in, computed_s, wall_s
from ultraplane.simulator.events import END, SUBMIT, TICK, Engine, Event
from ultraplane.simulator.faults import FaultPlan, FaultSource
from ultraplane.simulator.fleets import FleetShape, Ledger, chips_per_ultraserver
from ultraplane.simulator.inferenceside import InferenceSide
from ultraplane.simulator.models import (
    DEFAULT_ASSUMPTIONS,
    Assumptions,
    TrainingStep,
    spread_slowdown,
    training_step,
)
from ultraplane.simulator.powerside import PowerSide
from ultraplane.simulator.records import JobRecord, MoveRecord, ReplayResult, Series
from ultraplane.simulator.tenants import TenantLedger
from ultraplane.simulator.traces import TraceJob

from ultraplane.ids import ChipId, JobKey
from ultraplane.placement.allocator import Allocator, NoFit, Placement, PlacementRequest
from ultraplane.placement.placements import request_from_topology
from ultraplane.policies.cohorts import CohortSpec
from ultraplane.policies.powerbudgets import BudgetSpec
from ultraplane.policies.quotas import QueueSpec, QuotaBook
from ultraplane.resources.trainingjobs import FailurePolicy
from ultraplane.scheduling.admissions import Admissions, Failed, Moved, Replaced
from ultraplane.scheduling.moves import MoveRules
from ultraplane.scheduling.queueorder import DEFAULT_STRETCH, QueueOrder
from ultraplane.workloads import QueuedJob

POLICIES = ("ultraplane", "first-fit")
FAILURE_POLICIES = tuple(p.value for p in FailurePolicy)


@dataclass(frozen=True)
class ReplayConfig:
    policy: str = "ultraplane"
    chips_per_gpu: int = 1
    seed: int = 0
    checkpoint_interval_s: float = 600.0
    failure_policy: str = "RestartAll"
    # (job id, policy) for jobs whose policy is not `failure_policy` (a scripted scenario's)
    failure_policies: tuple[tuple[str, str], ...] = ()
    faults: FaultPlan = field(default_factory=FaultPlan)
    tokens_per_step: float = 4_194_304.0  # assumption for trace rows that name a model
    heatmap_bins: int = 240
    large_job_chips: int | None = None  # None: one UltraServer of the fleet (144 on Gen2)
    reservation: bool = True  # backfill reservation for the first waiting whole-UltraServer gang
    queue_stretch: float = DEFAULT_STRETCH  # rank = submit + stretch x run time; 0: FIFO
    assumptions: Assumptions = DEFAULT_ASSUMPTIONS
    # Tenant queues (a trace's `tenant` column names the job's queue): counted per tenant,
    # and enforced by the core (quota, borrowing, fair share, reclaim) unless `enforce_quotas`
    # is off (one shared queue, as without tenants).
    queues: tuple[QueueSpec, ...] | None = None
    # their cohorts' own settings, when cohorts nest (ultraplane.policies.cohorts)
    cohorts: tuple[CohortSpec, ...] = ()
    enforce_quotas: bool = True
    # Power (ultraplane.policies.powerbook): budgets enforced at admission, capping instead of refusing,
    # and UltraServers idle this long powered down (0: never). No budget and 0: today's replay.
    power_budgets: tuple[BudgetSpec, ...] = ()
    power_capping: bool = True
    idle_power_down_s: float = 0.0
    # Stop at this simulated time (None: when every job has ended); a study of a window.
    until_s: float | None = None
    # Moves (ultraplane.scheduling.moves): with enforced tenant queues, running jobs moved so
    # that a job within its queue's unused quota finds one UltraServer; `checkpoint_on_notice`:
    # training jobs save when told to move (a move loses the save time, not the work since
    # the last periodic checkpoint).
    moves: bool = True
    move_interval_s: float = 3600.0
    move_threshold_s: float = 600.0
    checkpoint_on_notice: bool = False
    # With enforced tenant queues: a queue's guaranteed jobs placed on the UltraServers it
    # already uses, among those about as good (ultraplane.placement.packings)
    queue_packing: bool = False

    def __post_init__(self) -> None:
        if self.idle_power_down_s < 0:
            raise ValueError("idle power-down must be 0 (off) or positive seconds")
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")
        for policy in (self.failure_policy, *(p for _, p in self.failure_policies)):
            if policy not in FAILURE_POLICIES:
                raise ValueError(f"failure policy must be one of {', '.join(FAILURE_POLICIES)}")
        if self.chips_per_gpu < 1:
            raise ValueError("chips-per-gpu must be >= 1")


class _Run:
    """A job's mutable state across attempts."""

    __slots__ = ("attempt_start", "busy_w", "cap", "chips", "delay", "end_token", "extra_w", "job",
                 "moves", "owed", "per_us", "placement", "rate", "record", "restarts", "saved",
                 "seg_t", "speed", "started_once", "util", "v", "v_needed")

    def __init__(self, job: TraceJob, chips: int, record: JobRecord) -> None:
        self.job, self.chips, self.record = job, chips, record
        self.saved = 0.0  # ideal seconds of work checkpointed
        self.rate = 1.0
        self.util = 0.0
        self.extra_w = 0.0
        self.attempt_start = 0.0
        self.end_token = 0
        self.restarts = 0
        self.moves = 0
        self.owed = 0.0  # wall seconds the next attempt pays besides its work (a save on notice)
        self.started_once = False
        self.placement: Placement | None = None
        self.per_us: dict[str, int] = {}
        # Power: an attempt runs on a virtual clock that advances at `speed` (1.0 uncapped);
        # `v` is its virtual seconds at `seg_t`, `v_needed` what it needs (wake delay included)
        self.speed, self.v, self.seg_t, self.v_needed, self.delay = 1.0, 0.0, 0.0, 0.0, 0.0
        self.cap: float | None = None
        self.busy_w: dict[str, float] = {}


class Replay:
    """One policy's replay of one trace on one topology."""

    def __init__(self, topology: Any, jobs: Sequence[TraceJob], config: ReplayConfig,
                 *, progress: Callable[[int], None] | None = None,
                 held: Mapping[str, Sequence[str]] | None = None,
                 services: Sequence[Any] = ()) -> None:
        self.cfg, self.a = config, config.assumptions
        self.shape = FleetShape.of(topology)
        self.allocator = Allocator(topology, policy=config.policy)  # type: ignore[arg-type]
        book = (QuotaBook(list(config.queues), config.cohorts) if config.queues is not None
                and config.enforce_quotas else None)
        self.engine = Engine(seed=config.seed, start=min((j.submit_s for j in jobs), default=0.0))
        self.ledger = Ledger(self.shape, start=self.engine.now)
        self.power = (PowerSide(config.power_budgets, self.shape, self.ledger,
                                capping=config.power_capping,
                                idle_power_down_s=config.idle_power_down_s)
                      if config.power_budgets or config.idle_power_down_s else None)
        self.admissions = Admissions(self.allocator, preemption=True,
                                     reservation=config.reservation,
                                     order=QueueOrder(stretch=config.queue_stretch), quotas=book,
                                     power=self.power.book if self.power is not None else None,
                                     moves=MoveRules(config.moves and book is not None,
                                                     config.move_interval_s,
                                                     config.move_threshold_s),
                                     queue_packing=config.queue_packing)
        if self.power is not None:
            self.power.bind(self.allocator, self.engine.now)
        self._power_at: float | None = None  # the power event scheduled next
        self._down_seen: frozenset[str] = frozenset()  # powered down after the last instant
        self._capped_runs: set[str] = set()
        self._settled_peak = self.ledger.power_w
        self._caps_at = -1  # the book's `changes` when caps were last chosen
        span = max((j.submit_s + j.duration_s for j in jobs), default=0.0) - self.engine.now
        self.tenants = (TenantLedger(config.queues, self.engine.now, sample_s=max(span / 500, 1.0),
                                     fleet_chips=self.shape.total_chips)
                        if config.queues is not None else None)
        self.faults = FaultSource(config.faults, self.shape, self.engine, self.allocator)
        self.jobs = jobs
        self.progress = progress
        self._policies = dict(config.failure_policies)
        self.runs: dict[str, _Run] = {}
        self.series = Series()
        self.result = ReplayResult(config.policy, self.shape.total_chips, list(self.shape.names))
        self.backlog = Backlog()
        self._waiting: dict[str, int] = {}  # chips of jobs queued inside the Scheduler
        # Waiting jobs of at least one whole UltraServer (key -> queue order): the ones that may
        # hold a backfill reservation. The smallest UltraServer's chips count as "whole".
        self._whole_chips = min(self.shape.chips_of.values(), default=0)
        self._whole: dict[str, tuple[int, float, int, str]] = {}
        # The last cycle's reservation: its UltraServers and predicted start (EASY).
        self._reserved: frozenset[str] = frozenset()
        self._rooms_cache: tuple[tuple[int, frozenset[str]], tuple[int, int, int, int]] | None = None
        self._shadow: float | None = None
        self._now = 0.0
        self._probe = Allocator(topology, policy=config.policy)  # type: ignore[arg-type]
        self._verdicts: dict[tuple[int, str | None], str | None] = {}
        # (quotas: every waiting job is in front of the Scheduler, which orders and reclaims)
        self._one_priority = len({j.priority for j in jobs}) <= 1 and book is None
        self._remaining = len(jobs)
        self._running_n = 0
        self._submitted = 0
        for key, chips in (held or {}).items():
            self._hold(key, chips)
        # Inference services in the same Scheduler (simulator/inferenceside.py). A service is
        # submitted to the Scheduler itself and preempts running jobs only, so the training
        # jobs keep their backlog when they share one priority.
        self.inference: InferenceSide | None = None
        if services:
            self.inference = InferenceSide(self, services)
            self._remaining += len(services)

    def _hold(self, key: str, chips: Sequence[str]) -> None:
        """A cluster file's existing allocation: busy (and drawing power) for the whole run."""
        self.allocator.assign(JobKey(key), chips)
        per_us = chips_per_ultraserver(chips)
        util = self.a.busy_utilization
        self.ledger.occupy(per_us, self.ledger.job_watts(per_us, util, "BF16", self.a), +1)

    # -- the loop ----------------------------------------------------------------------
    def run(self) -> ReplayResult:
        eng = self.engine
        for seq, job in enumerate(self.jobs):
            eng.schedule(job.submit_s, SUBMIT, Event("submit", (seq, job)))
        if self.jobs:
            last = max(j.submit_s + j.duration_s for j in self.jobs)
            self._tick_s = max((last - eng.now) / self.cfg.heatmap_bins, 1.0)
            eng.schedule(eng.now, TICK, Event("tick"))
            self.faults.start()
        if self.inference is not None:
            self.inference.start()
        until = self.cfg.until_s
        while True:
            if until is not None and (eng.peek_time() or until) > until:
                eng.now = max(eng.now, until)
                break
            batch = eng.pop_instant()
            if not batch:
                break
            t = eng.now
            self.ledger.advance(t)
            if self.tenants is not None:
                self.tenants.advance(t)
            if self.power is not None:
                self.power.advance(t, *self._capped())
            dirty = False
            for _, ev in batch:
                dirty |= self._handle(ev, t)
            if dirty and self._worth_a_cycle():
                self._cycle(t)
            if self.power is not None:
                self._power(t, dirty)
            self.series.add(t, self.ledger.busy, self.ledger.power_w,
                            len(self.backlog) + len(self._waiting))
            if self._remaining == 0 or self._stuck():
                break
        self._finish(eng.now)
        return self.result

    def _handle(self, ev: Event, t: float) -> bool:
        kind = ev.kind
        if kind == "end":
            self._complete(self.runs[ev.payload], t)
            return True
        if kind == "submit":
            self._submit(*ev.payload)
            return True
        if kind == "tick":
            self.result.heat_t.append(t)
            self.result.heat.append(self.ledger.occupancy(self.shape.names))
            if self._remaining and not self._stuck():
                self.engine.schedule(t + self._tick_s, TICK, Event("tick"))
            return False
        if kind == "power":
            self._power_at = None
            return False
        if kind in ("service", "service-window") and self.inference is not None:
            return self.inference.handle(ev, t)
        if kind in ("fail", "repair"):
            hit = self.faults.apply(ev, t, active=self._remaining > 0 and not self._stuck())
            for key, lost in hit.items():
                self._fault(self.runs[key], lost, t)
            return True
        raise ValueError(f"unknown event kind {kind!r}")

    def _stuck(self) -> bool:
        """Nothing runs, nothing arrives, nothing gets repaired: queued jobs can never start."""
        return (self._running_n == 0 and self._submitted == len(self.jobs)
                and self.faults.pending_repairs == 0
                and (self.inference is None or not self.inference.active))

    def _free(self) -> int:
        return self.shape.total_chips - self.ledger.busy - self.faults.failed_count()

    def _worth_a_cycle(self) -> bool:
        """Skip cycles that cannot admit anything (a saturated fleet, one priority class)."""
        if self.inference is not None and self.inference.wants_cycle():
            return True
        if not self._waiting and not len(self.backlog):
            return False
        if not self._one_priority:
            return True
        smallest = min([*self._waiting.values(), *self.backlog.sizes()])
        return self._free() >= smallest

    # -- job lifecycle -----------------------------------------------------------------
    def _submit(self, seq: int, job: TraceJob) -> None:
        chips = job.gpus * self.cfg.chips_per_gpu
        self._submitted += 1
        rec = JobRecord(job.job_id, job.submit_s, chips, duration_s=job.duration_s,
                        tenant=job.tenant or "")
        self.result.records.append(rec)
        self.runs[job.job_id] = _Run(job, chips, rec)
        request = request_from_topology(
            chips, {"requiredLevel": job.topology} if job.topology else None)
        never = self._never(request)
        queues = self.cfg.queues
        if never is None and queues is not None and all(q.name != job.tenant for q in queues):
            never = f"tenant {job.tenant!r} has no queue"
        if never is not None:  # larger than the fleet could ever hold: a verdict now
            rec.status, rec.reason = "rejected", never
            self._done()
            return
        # What the scheduler may predict with: the run time at the tightest placement, with
        # the checkpoints a training job writes (the replay charges them).
        expected = job.duration_s
        if job.kind == "training":
            expected += checkpoints_in(job.duration_s, self.cfg.checkpoint_interval_s,
                                       at_end=True) * self.a.checkpoint_cost_s
        queued = self.admissions.ranked(QueuedJob(
            JobKey(job.job_id), request, job.priority, seq, expected_s=expected,
            created_s=job.submit_s,
            queue=job.tenant if self.admissions.quotas is not None else None,
            checkpoint_s=(self.cfg.checkpoint_interval_s + self.a.checkpoint_cost_s
                          if job.kind == "training" and self.cfg.checkpoint_interval_s > 0
                          else None),
            notice_s=(self.a.checkpoint_cost_s
                      if job.kind == "training" and self.cfg.checkpoint_on_notice else None)))
        if self.tenants is not None and job.tenant is not None:
            self.tenants.wait(job.job_id, job.tenant, chips)
        if self.power is not None:
            busy = (self.a.busy_utilization if job.kind == "training"
                    else self.a.memory_bound_activity)
            self.power.describe(job.job_id, job.kind, job.precision, busy)
        if self._one_priority:
            self.backlog.add(queued)
        else:  # preemption needs every waiting job in front of the Scheduler
            self._wait(queued)

    def _never(self, request: PlacementRequest) -> str | None:
        """The allocator's reason a request can never fit the empty fleet (cached by shape)."""
        shape = (request.chips, request.required_level)
        if shape not in self._verdicts:
            got = self._probe.place(request)
            unsat = isinstance(got, NoFit) and got.kind == "Unsatisfiable"
            self._verdicts[shape] = got.message if unsat and isinstance(got, NoFit) else None
        return self._verdicts[shape]

    def _wait(self, job: QueuedJob) -> None:
        self.admissions.submit(job)
        self._waiting[job.key] = job.request.chips
        if job.request.chips >= self._whole_chips:
            self._whole[job.key] = job.order()

    def _before_shadow(self, key: str) -> bool:
        """Whether a waiting job would end before the last reservation starts (unknown: yes)."""
        if self._shadow is None:
            return True
        return self._now + self._wall_needed(self.runs[key]) <= self._shadow

    def _unwait(self, key: str) -> None:
        self._waiting.pop(key, None)
        self._whole.pop(key, None)

    def _rooms(self) -> tuple[int, int, int, int]:
        """(biggest room in one UltraServer, in one partly busy one, outside the reserved
        ones, chips of the idle ones), recomputed only when occupancy or the reservation moved."""
        stamp = (self.ledger.changes, self._reserved)
        if self._rooms_cache is not None and self._rooms_cache[0] == stamp:
            return self._rooms_cache[1]
        busy_of, chips_of, reserved = self.ledger.busy_of, self.shape.chips_of, self._reserved
        hole = partial = outside = idle_chips = 0
        for n, b in busy_of.items():
            room = chips_of[n] - b
            if room > hole:
                hole = room
            if b:
                if room > partial:
                    partial = room
            else:
                idle_chips += chips_of[n]
            if room > outside and n not in reserved:
                outside = room
        rooms = (hole, partial, outside, idle_chips)
        self._rooms_cache = (stamp, rooms)
        return rooms

    def _cycle(self, t: float) -> None:
        # The backlog stands in for the Scheduler's queue (which would hold every waiting job):
        # it hands over what could fit in the free chips left by the waiting jobs that could.
        # Only waiting jobs that could fit count against what is handed over: a gang larger
        # than the biggest hole in one UltraServer (it stays in one NeuronSwitch domain) is
        # blocked and takes no chips, so it must not hold back the smaller jobs behind it.
        free = self._free()
        whole = self._whole_chips
        # One pass over the UltraServers (this runs every cycle): `hole` is the biggest room in
        # one; a gang of several UltraServers takes idle ones (policy ultraplane) and the
        # remainder on one more (`partial`), so it counts only when that much is free; a job
        # that fits only on the UltraServers the last cycle reserved, and would end after the
        # reservation starts, cannot start either (EASY), so only room `outside` them counts.
        hole, partial, outside, idle_chips = self._rooms()
        idle = free if self.cfg.policy == "first-fit" else idle_chips

        def counts(key: str, c: int) -> bool:
            if c > whole:
                return c <= idle + partial
            if c <= outside:
                return True
            return c <= hole and self._before_shadow(key)

        # chips free and not claimed by a waiting job that could start in them (approx.)
        unclaimed = free - sum(c for k, c in self._waiting.items() if counts(k, c))
        for job in self.backlog.take(unclaimed, hole=hole, whole=whole):
            self._wait(job)
        if self.cfg.reservation and self._one_priority:
            # The first whole-UltraServer job must be in the Scheduler even when it cannot fit,
            # so that it reserves its domain as it would with every job queued there.
            head = self.backlog.pop_first(self._whole_chips)
            if head is not None:
                if self._whole and min(self._whole.values()) < head.order():
                    self.backlog.add(head)  # an older one is waiting there already
                else:
                    self._wait(head)
        decisions = self.admissions.cycle(t)
        held = decisions.reservation
        self._reserved = frozenset(held.ultraservers) if held is not None else frozenset()
        self._shadow = held.start if held is not None else None
        self._now = t
        side = self.inference
        for victim in decisions.preempted:
            if side is not None and side.owns(victim.key):
                side.preempted(victim.key)
                continue
            run = self.runs[victim.key]
            self.result.preemptions.append((victim.key, victim.by, t, victim.message))
            if side is None or not side.owns(victim.by):
                self._reclaimed(run, self.runs[victim.by], t, fairness=victim.fair_sharing)
            self._stop(run, t, released=True)
            self._waiting[victim.key] = run.chips
        for moved in decisions.moved:
            self._move(self.runs[moved.key], moved, t)
        for failed in decisions.failed:
            run = self.runs[failed.key]
            self._unwait(failed.key)
            run.record.status = "rejected"
            run.record.reason = failed.message
            if self.tenants is not None:
                self.tenants.unwait(failed.key)
            self._done()
        for admitted in decisions.admitted:
            if side is not None and side.owns(admitted.key):
                side.admitted(admitted, t)
                continue
            self._unwait(admitted.key)
            self._start(self.runs[admitted.key], admitted.placements[0], t)
        for up in decisions.scaled_up if side is not None else ():
            side.scaled_up(up, t)  # type: ignore[union-attr]

    def _start(self, run: _Run, placement: Placement, t: float) -> None:
        job, a = run.job, self.a
        run.placement = placement
        us = placement.ultraservers
        run.per_us = {us[0]: run.chips} if len(us) == 1 else chips_per_ultraserver(placement.chip_ids)
        self.result.starts += 1
        hw = self.shape.hardware_of[placement.ultraservers[0]]
        level = placement.level
        if job.model_b and job.kind == "training":
            def step(lvl: str) -> TrainingStep:
                return training_step(hw, params_b=job.model_b or 1.0,
                                     tokens_per_step=self.cfg.tokens_per_step,
                                     precision=job.precision, chips=run.chips, level=lvl, a=a)

            here = step(level)
            ideal = step(hw.ideal_level(run.chips))
            run.rate, run.util = min(1.0, ideal.seconds / here.seconds), here.utilization
        else:
            slow = spread_slowdown(hw, level, run.chips, a)
            run.rate = 1.0 / slow
            busy = a.busy_utilization if job.kind == "training" else a.memory_bound_activity
            run.util = busy / slow
        self._running_n += 1
        if self.tenants is not None and job.tenant is not None:
            self.tenants.unwait(job.job_id)
            self.tenants.hold(job.tenant, run.chips)
        run.extra_w = self.ledger.job_watts(run.per_us, run.util, job.precision, a)
        self.ledger.occupy(run.per_us, run.extra_w, +1)
        run.attempt_start = t
        run.speed, run.v, run.seg_t, run.cap, run.delay = 1.0, 0.0, t, None, 0.0
        if self.power is not None:
            run.delay = self.power.wake_delay(run.per_us, t)
            run.busy_w = {n: self.shape.hardware_of[n].chip_power(run.util, job.precision, a)
                          for n in run.per_us}
        if not run.started_once:
            run.started_once = True
            run.record.start_s = t
        run.record.ultraservers = len(placement.ultraservers)
        run.record.max_ultraservers = max(run.record.max_ultraservers, len(placement.ultraservers))
        self.result.placements.append((job.job_id, t, "start", placement.chip_ids))
        run.v_needed = run.delay + self._wall_needed(run)
        end = t + run.v_needed
        run.end_token = self.engine.schedule(end, END, Event("end", job.job_id))
        self.admissions.expect_end(JobKey(job.job_id), end)  # the replay knows it exactly

    # -- power -------------------------------------------------------------------------
    def _capped(self) -> tuple[int, float]:
        """(chips, watts over idle) of the jobs running under a cap."""
        runs = [self.runs[k] for k in self._capped_runs]
        return sum(r.chips for r in runs), sum(r.extra_w for r in runs)

    def _power(self, t: float, dirty: bool) -> None:
        """Execute the core's power decisions at `t`: wakes and power-downs, the caps after a
        change of the running set, then a power.csv row and the next power-down event."""
        side = self.power
        assert side is not None
        side.states_changed(self._down_seen, t)
        if dirty and side.measuring:  # Measured budgets: the draw each UltraServer drew
            side.measure(self._extra_of_us())
        if dirty and side.book.changes != self._caps_at:
            self._caps_at = side.book.changes
            for key, cap in side.book.caps(t).items():
                run = self.runs.get(key)
                if run is not None and run.cap != cap:
                    self._recap(run, t, cap)
        self._down_seen = side.book.states.down()
        side.record(t, side.budget_draw({} if side.fleetwide else self._extra_of_us()))
        # the fleet's peak as settled at the end of an instant: a job admitted and capped at
        # the same instant never drew its uncapped power
        self._settled_peak = max(self._settled_peak, self.ledger.power_w)
        self.ledger.peak_w = self._settled_peak
        due = side.book.states.next_due()
        if (due is not None and self._remaining and not self._stuck()
                and (self._power_at is None or due < self._power_at)):
            self._power_at = max(due, t)
            self.engine.schedule(self._power_at, TICK, Event("power"))

    def _extra_of_us(self) -> dict[str, float]:
        """Watts over idle that running jobs draw on each UltraServer."""
        extra: dict[str, float] = {}
        for key in self.admissions.running():
            run = self.runs[key]
            for n, k in run.per_us.items():
                extra[n] = extra.get(n, 0.0) + run.extra_w * k / run.chips
        return extra

    def _recap(self, run: _Run, t: float, cap: float | None) -> None:
        """A running job's cap moved: close its segment, change its draw and speed."""
        assert self.power is not None
        speed, extra = self.power.speed_and_extra(run.per_us, run.busy_w, cap)
        dt = t - run.seg_t
        idle = sum(self.shape.hardware_of[n].idle_watts * k for n, k in run.per_us.items())
        run.record.energy_kwh += (run.extra_w + idle) * dt / 3.6e6
        run.v += dt * run.speed
        self.ledger.adjust(extra - run.extra_w)
        run.extra_w, run.speed, run.cap, run.seg_t = extra, speed, cap, t
        if cap is None:
            self._capped_runs.discard(run.job.job_id)
        else:
            self._capped_runs.add(run.job.job_id)
        self.engine.cancel(run.end_token)
        end = t + max(run.v_needed - run.v, 0.0) / speed
        run.end_token = self.engine.schedule(end, END, Event("end", run.job.job_id))
        self.admissions.expect_end(JobKey(run.job.job_id), end)

    def _restart_cost(self, run: _Run) -> float:
        return self.a.restart_cost_s if run.restarts else 0.0

    def _wall_needed(self, run: _Run) -> float:
        """Wall time to finish the remaining work, with restart and checkpoint costs."""
        compute = (run.job.duration_s - run.saved) / run.rate
        if run.job.kind != "training":
            return self._restart_cost(run) + compute
        return self._restart_cost(run) + run.owed + wall_s(
            compute, self.cfg.checkpoint_interval_s, self.a.checkpoint_cost_s)

    def _stop(self, run: _Run, t: float, *, released: bool, notice: bool = False) -> None:
        """End an attempt early: keep the work up to the last checkpoint (all of it when the
        job saves on `notice`), account energy."""
        self.engine.cancel(run.end_token)
        self._account(run, t)
        before = run.saved
        if run.job.kind == "training":
            worked = (run.v + (t - run.seg_t) * run.speed - run.delay - self._restart_cost(run)
                      - run.owed)
            kept = computed_s if notice else checkpointed_s
            done = kept(worked, self.cfg.checkpoint_interval_s, self.a.checkpoint_cost_s) * run.rate
            run.saved = min(run.saved + done, run.job.duration_s)
        self.result.attempts.append((run.attempt_start, t, run.chips, run.saved - before))
        run.owed = 0.0
        run.restarts += 1
        if released:
            assert run.placement is not None
            self.result.placements.append((run.job.job_id, t, "end", run.placement.chip_ids))

    def _account(self, run: _Run, t: float) -> None:
        busy_w = run.extra_w + sum(self.shape.hardware_of[n].idle_watts * k for n, k in run.per_us.items())
        run.record.energy_kwh += busy_w * (t - run.seg_t) / 3.6e6
        self._running_n -= 1
        self.ledger.occupy(run.per_us, run.extra_w, -1)
        self._capped_runs.discard(run.job.job_id)
        if self.tenants is not None and run.job.tenant is not None:
            self.tenants.release(run.job.tenant, run.chips)

    def _complete(self, run: _Run, t: float) -> None:
        self._account(run, t)
        assert run.placement is not None
        self.result.placements.append((run.job.job_id, t, "end", run.placement.chip_ids))
        self.admissions.withdraw(JobKey(run.job.job_id))
        self.result.attempts.append((run.attempt_start, t, run.chips,
                                     run.job.duration_s - run.saved))
        run.record.end_s, run.record.status = t, "completed"
        self._done()

    def _fault(self, run: _Run, lost: Sequence[str], t: float) -> None:
        """The core decides (`Admissions.chip_failed`, the one place failure policies live);
        the replay only executes: replaced in place, requeued, or failed."""
        key = JobKey(run.job.job_id)
        queued = self.admissions.running().get(key)
        self._stop(run, t, released=True)
        policy = self._policies.get(key, self.cfg.failure_policy)
        decided = self.admissions.chip_failed(key, {key: [ChipId(c) for c in lost]}, policy)
        if isinstance(decided, Failed):
            run.record.end_s, run.record.status = t, "failed"
            run.record.reason = decided.message
            self._done()
            return
        if isinstance(decided, Replaced):
            self._start(run, decided.placements[0], t)
            return
        self._waiting[key] = run.chips  # Restarted: queued again with its rank
        if self.tenants is not None and run.job.tenant is not None:
            self.tenants.wait(key, run.job.tenant, run.chips)
        if queued is not None and run.chips >= self._whole_chips:
            self._whole[key] = queued.order()

    def _move(self, run: _Run, moved: Moved, t: float) -> None:
        """A running job moved by the core to make room: it stops (keeping its checkpointed
        work, or all of it when it saves on notice, paying the save) and starts at once on
        its new chips, paying a restart; the work it lost and the restart count as lost."""
        notice = self.cfg.checkpoint_on_notice and run.job.kind == "training"
        elapsed = t - run.attempt_start
        lost = self._unsaved_s(run, elapsed) if not notice else self.a.checkpoint_cost_s
        self._stop(run, t, released=True, notice=notice)
        if notice:
            run.owed = self.a.checkpoint_cost_s
        run.moves += 1
        run.record.moves = run.moves
        self.result.moves += 1
        lost_chip_s = run.chips * (lost + self.a.restart_cost_s)
        self.result.moved_lost_chip_s += lost_chip_s
        self.result.move_log.append(MoveRecord(t, run.job.job_id, str(moved.by), moved.origin,
                                               moved.placement.ultraservers, lost_chip_s))
        self._start(run, moved.placement, t)

    def _unsaved_s(self, run: _Run, elapsed: float) -> float:
        """Wall seconds of an attempt `elapsed` long not kept by its periodic checkpoints."""
        if run.job.kind != "training":
            return elapsed
        interval, cost = self.cfg.checkpoint_interval_s, self.a.checkpoint_cost_s
        saved = checkpointed_s(elapsed - self._restart_cost(run) - run.owed, interval, cost)
        return elapsed - (saved / interval * (interval + cost) if interval > 0 else 0.0)

    def _reclaimed(self, run: _Run, by: _Run, t: float, *, fairness: bool = False) -> None:
        """A preempted job waits again; a preemption across tenants is a reclaim (or, with
        `fairness`, a fair-sharing preemption), and the work since its last checkpoint is
        counted lost to it."""
        if self.tenants is None or run.job.tenant is None:
            return
        self.tenants.wait(run.job.job_id, run.job.tenant, run.chips)
        if by.job.tenant == run.job.tenant:
            return
        elapsed = t - run.attempt_start
        kept = 0.0
        if run.job.kind == "training":
            interval, cost = self.cfg.checkpoint_interval_s, self.a.checkpoint_cost_s
            saved = checkpointed_s(elapsed - self._restart_cost(run), interval, cost)
            kept = saved / interval * (interval + cost) if interval > 0 else 0.0  # wall seconds
        if fairness:
            self.tenants.preempted_for_fairness(run.job.tenant, run.chips * (elapsed - kept))
        else:
            self.tenants.reclaimed(run.job.tenant, run.chips * (elapsed - kept))

    def _done(self) -> None:
        self._remaining -= 1
        if self.progress is not None:
            self.progress(1)

    def _finish(self, t: float) -> None:
        self.ledger.advance(t)
        if self.cfg.until_s is not None:  # stopped early: the work of running attempts counts
            for key in self.admissions.running():
                run = self.runs.get(key)
                if run is not None and run.started_once:
                    worked = run.v + (t - run.seg_t) * run.speed - run.delay
                    self.result.attempts.append((run.attempt_start, t, run.chips,
                                                 max(worked, 0.0) * run.rate))
        if self.inference is not None:
            self.result.services = list(self.inference.services.values())
        for run in self.runs.values():
            if run.record.status == "pending":
                run.record.status = "unfinished"
        self.result.energy_kwh = self.ledger.energy_j / 3.6e6
        self.result.busy_chip_s = self.ledger.busy_chip_s
        self.result.peak_power_w = self.ledger.peak_w
        self.result.idle_power_w = self.shape.idle_watts()
        # heap events (arrivals, ends, faults, samples) plus admissions, which the cycle decides
        self.result.events = self.engine.processed + self.result.starts
        self.result.series = self.series
        self.result.t0 = min((j.submit_s for j in self.jobs), default=0.0)
        self.result.t_end = t
        if self.tenants is not None:
            self.result.tenants = self.tenants.close(t, ())
        if self.power is not None:
            self.power.advance(t, *self._capped())
            self.result.power = self.power.figures
