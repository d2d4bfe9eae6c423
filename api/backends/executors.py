"""Glue between the core's decisions and the JobRuntime, for the embedded backend.

The core (`ultraplane.scheduling.admissions`) decides every consequence of every trigger: a cycle (with
the simulated clock, so EASY backfill by predicted ends and SplitWhenItPays pricing run here
as in the operator), a chip failed (the failure policy), a job finished or deleted. This
module only persists what it decided: the status document comes from the core's one builder
(`ultraplane.documents.jobstatuses`, the same phases, reasons and conditions the operator writes), the
runtime executes on the chips, and the usage accounting integrates is sampled here
(chip-hours per simulated day and energy deltas).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ultraplane.api.backends.embeddedjobs import JobState
from ultraplane.api.store.accounting import day_of, split_by_day
from ultraplane.api.store.tables import AccountingCreate

from ultraplane.documents import jobstatuses, overrides
from ultraplane.documents.conversions import TERMINAL_PHASES, InvalidJobError
from ultraplane.documents.jobspecs import expected_end
from ultraplane.documents.jobstatuses import StatusDecision
from ultraplane.hardware.topology import UltraServer
from ultraplane.ids import ChipId, JobKey
from ultraplane.policies.budgetdocuments import job_power
from ultraplane.scheduling.admissions import Requeued
from ultraplane.scheduling.decisions import (
    Admitted,
    Failed,
    Pending,
    Preempted,
    Replaced,
    Restarted,
    ScaledDown,
    ScaledUp,
    ScalingUp,
)
from ultraplane.workloads import replica_key

if TYPE_CHECKING:
    from ultraplane.api.backends.embedded import EmbeddedBackend

log = logging.getLogger("ultraplane.api.embedded")


def moment(t_s: float) -> datetime:
    """Simulated unix seconds as the datetime the status builder stamps."""
    return datetime.fromtimestamp(t_s, tz=UTC)


class DecisionExecutor:
    """The embedded fleet's hands: it hands the core its triggers (a job in, a tick's runtime
    events, chips failed, a job deleted), persists what the core decided on each job's status
    (through the one status builder), starts and stops the jobs on the runtime, and samples
    their usage for accounting. It decides nothing itself."""

    def __init__(self, backend: EmbeddedBackend) -> None:
        self.b = backend
        self._index: dict[str, JobState] = {}  # job key -> job, kept by register and forget
        self._deleted: set[str] = set()  # uids deleted before they finished (accounting says so)
        # Jobs with a decision written outside a cycle (a chip failed under them, a runtime
        # event) since the last one: their Pending status waits for the next cycle, as the
        # operator's does while that write is still in its outbox, so both say what the fleet
        # looks like after the cycle's admissions.
        self._unsent: set[str] = set()
        # Queue keys whose Pending the last cycle deferred so: the next cycle writes them.
        self._owed: set[str] = set()

    # -- lookups ---------------------------------------------------------------------------
    def index(self, job: JobState) -> None:
        self._index[job.key] = job

    def unindex(self, job: JobState) -> None:
        if self._index.get(job.key) is job:
            del self._index[job.key]

    def _by_sched_key(self, key: str) -> JobState | None:
        """The job owning a scheduler key (`tj/ns/name`, or `ij/ns/name#replica`)."""
        return self._index.get(key.split("#", 1)[0])

    def _set(self, job: JobState, **fields: Any) -> None:
        job.status = jobstatuses.apply(job.status, fields)
        self.b.touched(job)

    def _write(self, job: JobState, decision: StatusDecision, now: float) -> None:
        """Persist a core decision on the job's status, through the core's one builder."""
        patch = jobstatuses.status_of(job.status, decision, moment(now),
                                      replicated=job.kind == "InferenceJob")
        self._set(job, **patch)

    def _ran(self, job: JobState, phase: str, message: str | None, now: float) -> None:
        """What the runtime says (Running, or how it ended), as the simulator's kubelet says it."""
        self._set(job, **jobstatuses.ran(job.status, phase, message, moment(now)))

    # -- intake ----------------------------------------------------------------------------
    def submit(self, job: JobState) -> None:
        self.b.power.describe(job.key, job_power(job.kind, job.spec_wire))
        if not job.held:
            self.b.admissions.submit(job.queued)

    def power(self, now: float) -> bool:
        """The fleet's simulated draw to the power book (the telemetry the Measured policy
        reads), and each running job's cap: `powerCapWatts` and `cappedSince` in its status,
        and on its simulated chips. True when a cap changed (the fleet's draw moved)."""
        book = self.b.power
        book.measure({v.name: v.power_watts for v in self.b.fleet.ultraservers})
        changed = False
        for key, cap in book.caps(now).items():
            job = self._by_sched_key(key)
            if job is None:
                continue
            status = jobstatuses.power_cap(cap, book.capped_for(key, now), moment(now))
            if job.status.get("powerCapWatts") == status["powerCapWatts"]:
                continue
            # from now it draws less and runs slower
            self.b.runtime.set_cap(job.key, status["powerCapWatts"])
            self._set(job, **status)
            changed = True
        return changed

    def recover(self, now: float) -> None:
        """After a restart: re-adopt chips from the store, resume from checkpoints, requeue the rest."""
        for key, chips in self.b.fleet.preset.items():
            self.b.admissions.hold(key, [ChipId(c) for c in chips])
        for job in sorted(self.b.jobs.values(), key=lambda j: j.seq):
            if job.finished:
                continue
            if job.held:
                queued = job.queued
                keys = [k for k in job.sched_keys if job.held.get(k)]
                if queued.replicas is not None:  # as many as were placed; the spec's next
                    queued = replace(queued, replicas=max(1, len(keys)))
                else:
                    keys = job.sched_keys
                parts = [[ChipId(c) for c in job.held.get(k, ())] for k in keys]
                outcome = self.b.admissions.readopt(queued, parts)
                if isinstance(outcome, Requeued):
                    log.warning("cannot re-adopt %s (%s); requeueing it", job.key,
                                outcome.message)
                    job.held.clear()
                    self._write(job, Restarted(outcome.key, "AllocationLost", outcome.message),
                                now)
                else:
                    self._start(job, now)
                    if queued.replicas is not None and queued.replicas != job.queued.replicas:
                        self.rescale(job, now)
                continue
            if job.running:
                self._write(job, Restarted(job.key, "Restarted",
                                           "The API restarted; the job waits again."), now)
            self.submit(job)

    # -- one tick: advance, sample (a chunk at a time), decide ------------------------------
    def advance(self, now: float) -> int:
        """The runtime's events up to `now` (finishes, chip failures), applied; their count."""
        events = 0
        for event in self.b.runtime.advance():
            events += 1
            job = self._by_sched_key(event.key)
            if job is not None and job.running:
                self._on_event(job, event, now)
                self._unsent.add(job.key)
        return events

    def sample(self, job: JobState, now: float) -> None:
        """A running job's progress, power and usage as of `now` (state lock held)."""
        self._sample(job, now)

    def decide(self, now: float, *, events: int) -> None:
        """The scheduling cycles this tick needs, after every running job was sampled: the
        cycle predicts running jobs' ends from their progress, as the operator does from what
        the runtime last wrote."""
        # A cycle over an unchanged queue and fleet decides what the last one did; skipping it
        # keeps a deep queue from holding the fleet lock (and every request) each tick.
        if self.b.cycle_due(changed=events > 0):
            # Until nothing moves (at most 3), as the operator's cycles follow its own writes:
            # victims get their places in the queue, and waiting jobs' reasons say what the
            # fleet looks like after this tick's admissions.
            # A cycle that deferred a Pending write is always followed by one that makes it.
            for _ in range(3):
                moved = self._cycle(now)
                self._unsent.clear()
                if not (moved or self._owed):
                    break
        self._unsent.clear()

    def _cycle(self, now: float) -> bool:
        """One cycle, persisted; True when it preempted or admitted (the next cycle may say
        something new of the jobs still waiting)."""
        # Predicted ends of running jobs from their progress, as the operator reads them.
        for live in self.b.live.values():
            self.b.admissions.expect_end(live.key, expected_end(live.status, moment(now)))
        decisions = self.b.admissions.cycle(now)
        self.b.reserved = decisions.held_for()
        holder = None if decisions.reservation is None else self._by_sched_key(
            decisions.reservation.key)
        self.b.reservation = None if holder is None else (
            tuple(self.b.reserved), holder.priority)
        for victim in decisions.preempted:
            job = self._by_sched_key(victim.key)
            if job is not None:
                self._preempted(job, victim, now)
        for failed in decisions.failed:
            job = self._by_sched_key(failed.key)
            if job is not None:
                self._failed(job, failed, now)
        for admitted in decisions.admitted:
            job = self._by_sched_key(admitted.key)
            if job is not None:
                self._admitted(job, admitted, now)
            else:  # an orphan (deleted meanwhile): give the chips back
                self.b.admissions.deleted(admitted.key)
        for up in decisions.scaled_up:
            job = self._by_sched_key(up.key)
            if job is not None:
                self._scaled_up(job, up, now)
        owed, self._owed = self._owed, set()
        for waiting in decisions.fresh:  # the rest were written as they are
            owed.discard(waiting.key)
            job = self._by_sched_key(waiting.key)
            if job is not None:
                self._pending(job, waiting, now)
        if owed:  # deferred last cycle and unchanged since, so not fresh: written now
            for waiting in decisions.pending:
                job = self._by_sched_key(waiting.key) if waiting.key in owed else None
                if job is not None:
                    self._pending(job, waiting, now)
        return bool(decisions.preempted or decisions.admitted)

    def _on_event(self, job: JobState, event: Any, now: float) -> None:
        """The runtime says a job succeeded: the core releases its chips and
        the status says so as the operator's does. Chip failures do not come this way: they
        are decided by the core when the chip is marked failed (`chips_failed`)."""
        kind = str(event.kind)
        if kind not in TERMINAL_PHASES:
            return
        # The event happened `lag` simulated seconds before this tick; account up to it exactly.
        lag = max(0.0, float(self.b.runtime.now()) - float(event.t_s))
        at = max(job.last_sample_s or now, now - lag)
        self._sample(job, at)
        # what the runtime's status says (as the simulator's kubelet writes it), not the event's
        said = str(getattr(self.b.runtime.status(job.key), "message", "") or "")
        finished = self.b.admissions.finished(job.key, kind, said)
        job.held.clear()
        job.finished_s = at
        self._ran(job, kind, finished.message or None, at)
        self._write(job, finished, at)

    def health_changed(self, before: UltraServer, after: UltraServer,
                       now: float) -> list[JobState]:
        """An UltraServer's failed chips changed (the allocator has adopted `after`): the jobs
        on newly failed chips get the core's decision, the runtime marks the chips. Returns
        the jobs whose status changed."""
        newly = sorted(after.failed_chips - before.failed_chips)
        lost: dict[JobKey, list[ChipId]] = {}
        for ref in newly:
            chip = ChipId(f"{after.name}/{ref}")
            holder = self.b.allocator.job_of(chip)
            if holder is not None:
                lost.setdefault(holder, []).append(chip)
        touched = self.chips_failed(lost, now)
        for ref in newly:  # after the jobs stopped: the runtime only marks the chip
            self.b.runtime.fail_chip(f"{after.name}/{ref}")
        for ref in sorted(before.failed_chips - after.failed_chips):
            self.b.runtime.repair_chip(f"{after.name}/{ref}")
        return touched

    def chips_failed(self, lost: Mapping[JobKey, Sequence[ChipId]],
                     now: float) -> list[JobState]:
        """Chips failed under running jobs (allocator key -> chips): the core applies each
        job's failure policy (`Admissions.chip_failed`); this persists what it decided."""
        by_job: dict[JobKey, dict[JobKey, list[ChipId]]] = {}
        touched: list[JobState] = []
        for part, chips in lost.items():
            owner = self.b.admissions.owner(part)
            by_job.setdefault(owner, {}).setdefault(part, []).extend(chips)
        for key, parts in by_job.items():
            job = self._index.get(key)
            if job is None or not job.held:
                continue
            decided = self.b.admissions.chip_failed(key, parts, job.read.failure_policy)
            touched.append(job)
            self._unsent.add(job.key)
            if job.running:
                self._sample(job, now)
                self._close_attempt(job, self.b.runtime.stop(job.key))
            job.held.clear()
            if isinstance(decided, Replaced):
                for part, placement in zip(job.sched_keys, decided.placements, strict=True):
                    job.held[part] = list(placement.chip_ids)
                self._write(job, decided, now)
                self._start(job, now)
            elif isinstance(decided, Failed):
                job.finished_s = now
                self._write(job, decided, now)
            else:
                self._write(job, decided, now)  # the core queued it again
        return touched

    def rescale(self, job: JobState, now: float, overridden: str = "") -> None:
        """The job's spec.replicas changed (`EmbeddedBackend.scale_job`): the core decides
        (`Admissions.rescale`); removed replicas give back their chips at once, added ones
        wait for the next cycles; the others keep theirs. `overridden` says the count was
        set outside the job's autoscaling (`documents.overrides`)."""
        decided = self.b.admissions.rescale(job.key, job.queued.replicas or 1,
                                            "Set by spec.replicas.")
        if overridden:
            self._set(job, **overrides.overridden(job.status, overridden, moment(now)))
        if isinstance(decided, ScaledDown):
            for part in decided.removed:
                job.held.pop(part, None)
            self._write(job, decided, now)
            self._rerun(job, now)
        elif isinstance(decided, ScalingUp):
            self._write(job, decided, now)

    def _scaled_up(self, job: JobState, up: ScaledUp, now: float) -> None:
        """A cycle placed added replicas of a running job (or says why they wait)."""
        for index, placement in up.added:
            job.held[replica_key(job.key, index)] = list(placement.chip_ids)
        self._write(job, up, now)
        if up.added:
            self._rerun(job, now)

    def _rerun(self, job: JobState, now: float) -> None:
        """The simulated job on its chips as they are now: the runtime plans a job for a
        fixed set of chips, so its attempt is closed and started again there (the replicas'
        chips do not move; no restart is counted)."""
        if job.running:
            self._sample(job, now)
            self._close_attempt(job, self.b.runtime.stop(job.key))
            self._start(job, now)

    def _preempted(self, job: JobState, victim: Preempted, now: float) -> None:
        """The core requeued the whole job (every replica); stop it and say who."""
        if job.running:
            self._sample(job, now)
            self._close_attempt(job, self.b.runtime.stop(job.key))
        job.held.clear()
        self._write(job, victim, now)

    def _admitted(self, job: JobState, admitted: Admitted, now: float) -> None:
        """Every gang of the job placed at once (all replicas of an InferenceJob)."""
        for key, placement in zip(job.sched_keys, admitted.placements, strict=True):
            job.held[key] = list(placement.chip_ids)
        self._write(job, admitted, now)
        self._start(job, now)

    def _start(self, job: JobState, now: float) -> None:
        chips = [c for key in job.sched_keys for c in job.held.get(key, ())]
        resume = job.checkpointed_steps if job.kind == "TrainingJob" else 0
        try:
            self.b.runtime.start(job.key, job.spec, chips, resume_steps=resume, kind=job.kind)
        except Exception as exc:  # a spec the runtime cannot run fails that job, not the API
            log.warning("runtime rejected %s: %s", job.key, exc)
            self._release(job)
            job.finished_s = now
            self._ran(job, "Failed", f"the runtime cannot run it: {exc}", now)
            self._write(job, self.b.admissions.finished(job.key, "Failed"), now)
            return
        job.started_s = job.started_s if job.started_s is not None else now
        job.last_sample_s = now
        self._ran(job, "Running", None, now)

    def _failed(self, job: JobState, failed: Failed, now: float) -> None:
        """The core took it out of the queue (Unsatisfiable: it can never fit the fleet)."""
        job.held.clear()
        job.finished_s = None
        self._write(job, failed, now)

    def _pending(self, job: JobState, waiting: Pending, now: float) -> None:
        """Rewritten by the operator's rule (`jobstatuses.pending_changed`), so both say the
        same: not for a predicted start that moved with the clock."""
        if job.key in self._unsent:
            self._owed.add(waiting.key)  # written at the next cycle (see `decide`)
        elif jobstatuses.pending_changed(job.status, waiting):
            self._write(job, waiting, now)

    # -- usage -----------------------------------------------------------------------------
    def _sample(self, job: JobState, now: float) -> None:
        status = self.b.runtime.status(job.key)
        last = job.last_sample_s if job.last_sample_s is not None else now
        energy = float(getattr(status, "energy_kwh", 0.0))
        delta_kwh = max(0.0, energy - job.rt_energy_seen_kwh)
        for day, (hours, kwh) in split_by_day(last, now, chips=job.chips, energy_kwh=delta_kwh).items():
            job.add_usage(day, hours, kwh)
        job.rt_energy_seen_kwh = max(job.rt_energy_seen_kwh, energy)
        job.last_sample_s = now
        job.checkpointed_steps = max(job.checkpointed_steps, status.checkpointed_steps)
        # The runtime's figures through the core's one builder (the simulator's kubelet writes
        # the very same), with the usage this backend keeps across restarts (the runtime's own
        # energy and chip-hours begin at zero in a new process).
        figures = replace(status, checkpointed_steps=job.checkpointed_steps,
                          energy_kwh=job.energy_kwh, chip_hours=job.chip_hours)
        job.status = jobstatuses.apply(job.status, jobstatuses.measured(job.kind, figures))

    def _close_attempt(self, job: JobState, stopped: Any) -> None:
        if stopped is not None:
            job.checkpointed_steps = max(job.checkpointed_steps,
                                         int(getattr(stopped, "checkpointed_steps", 0) or 0))
            energy = float(getattr(stopped, "energy_kwh", 0.0))
            if job.last_sample_s is not None:
                day = next(reversed(job.days), None) or day_of(job.last_sample_s)
                job.add_usage(day, 0.0, max(0.0, energy - job.rt_energy_seen_kwh))
            job.rt_energy_seen_kwh = max(job.rt_energy_seen_kwh, energy)
        job.last_sample_s = None

    def _release(self, job: JobState) -> None:
        self.b.admissions.deleted(job.key)
        job.held.clear()

    def remove(self, job: JobState, now: float) -> None:
        """Delete: the core releases it; stop it, accounting keeps what it used. Its status is
        left as it was (no `Deleted` phase: the object goes); accounting records `Deleted`."""
        if job.running:
            self._sample(job, now)
            self._close_attempt(job, self.b.runtime.stop(job.key))
        self.b.admissions.deleted(job.key)
        job.held.clear()
        if not job.finished:
            job.finished_s = now if job.started_s is not None else None
            self._deleted.add(job.uid)

    def _queue_of(self, job: JobState) -> str | None:
        book = self.b.admissions.quotas
        if book is None or not book.active:
            return None
        try:
            return book.queue_of(job.queued)
        except InvalidJobError:  # a spec the core cannot read has no queue either
            return None

    def accounting_of(self, job: JobState) -> tuple[AccountingCreate, dict[str, tuple[float, float]]]:
        """The job's accounting row and per-day usage, as of its last sample."""
        phase = "Deleted" if job.uid in self._deleted else job.phase
        done = phase in TERMINAL_PHASES
        completion = None
        if done and job.finished_s is not None:
            completion = max(0.0, job.finished_s - job.created_s)
        record = AccountingCreate(
            job_uid=job.uid, kind=job.kind, namespace=job.namespace, name=job.name,
            queue=self._queue_of(job), chips=job.chips, phase=phase, submitted_s=job.created_s, started_s=job.started_s,
            finished_s=job.finished_s,
            chip_hours=sum(v[0] for v in job.days.values()),
            energy_kwh=sum(v[1] for v in job.days.values()),
            completion_time_s=completion,
        )
        return record, {d: (v[0], v[1]) for d, v in job.days.items()}
