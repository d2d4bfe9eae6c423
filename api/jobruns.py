"""Glue between the Scheduler's decisions and the JobRuntime, for the embedded backend.

The Scheduler decides who holds which chips; the runtime executes on them.
This module keeps the two in step and writes the job status the resources
contract defines (phase, allocation, progress, energy), plus the usage that
accounting integrates: chip-hours per simulated day and energy deltas.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ultraplane.api.accounting import day_of, split_by_day
from ultraplane.api.jobstates import JobState, rfc3339
from ultraplane.api.models import AccountingCreate

from ultraplane.admissions import Admitted, Failed, Pending, Requeued
from ultraplane.ids import ChipId

if TYPE_CHECKING:
    from ultraplane.api.embedded import EmbeddedBackend

log = logging.getLogger("ultraplane.api.embedded")


class JobRunner:
    def __init__(self, backend: EmbeddedBackend) -> None:
        self.b = backend
        self._index: dict[str, JobState] = {}  # job key -> job, kept by register and forget

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
        for name, value in fields.items():
            if value is None:
                job.status.pop(name, None)
            else:
                job.status[name] = value
        self.b.touched(job)

    # -- intake ----------------------------------------------------------------------------
    def submit(self, job: JobState) -> None:
        if not job.held:
            self.b.admissions.submit(job.queued)

    def recover(self, now: float) -> None:
        """After a restart: re-adopt chips from the store, resume from checkpoints, requeue the rest."""
        for key, chips in self.b.fleet.preset.items():
            self.b.scheduler.restore(key, [ChipId(c) for c in chips], priority=10**9,
                                     preemptible=False)
        for job in sorted(self.b.jobs.values(), key=lambda j: j.seq):
            if job.finished:
                continue
            if job.held:
                parts = [[ChipId(c) for c in job.held.get(k, ())] for k in job.sched_keys]
                outcome = self.b.admissions.readopt(job.queued, parts)
                if isinstance(outcome, Requeued):
                    log.warning("cannot re-adopt %s (%s); requeueing it", job.key,
                                outcome.message)
                    job.held.clear()
                    self._set(job, phase="Pending", reason="AllocationLost",
                              message=outcome.message, allocation=None)
                else:
                    self._start(job, now, restarted=True)
                continue
            if job.running:
                self._set(job, phase="Pending", reason="Restarted")
            self.submit(job)

    # -- one tick --------------------------------------------------------------------------
    def step(self, now: float) -> None:
        events = 0
        for event in self.b.runtime.advance():
            events += 1
            job = self._by_sched_key(event.key)
            if job is not None and job.running:
                self._on_event(job, event, now)
        # A cycle over an unchanged queue and fleet decides what the last one did; skipping it
        # keeps a deep queue from holding the fleet lock (and every request) each tick.
        if self.b.cycle_due(changed=events > 0):
            self._cycle(now)
        for job in list(self.b.live.values()):
            self._sample(job, now)

    def _cycle(self, now: float) -> None:
        decisions = self.b.admissions.cycle()
        self.b.reserved = decisions.held_for()
        holder = None if decisions.reservation is None else self._by_sched_key(
            decisions.reservation.key)
        self.b.reservation = None if holder is None else (
            tuple(self.b.reserved), holder.priority)
        for victim in decisions.preempted:
            job = self._by_sched_key(victim.key)
            if job is not None:
                self._preempted(job, victim.by, now)
        for failed in decisions.failed:
            job = self._by_sched_key(failed.key)
            if job is not None:
                self._failed(job, failed)
        for admitted in decisions.admitted:
            job = self._by_sched_key(admitted.key)
            if job is not None:
                self._admitted(job, admitted, now)
            else:  # an orphan (deleted meanwhile): give the chips back
                self.b.admissions.withdraw(admitted.key)
        for waiting in decisions.fresh:  # the rest were written as they are
            job = self._by_sched_key(waiting.key)
            if job is not None:
                self._pending(job, waiting)

    def _on_event(self, job: JobState, event: Any, now: float) -> None:
        kind = str(event.kind)
        # The event happened `lag` simulated seconds before this tick; account up to it exactly.
        lag = max(0.0, float(self.b.runtime.now()) - float(event.t_s))
        at = max(job.last_sample_s or now, now - lag)
        self._sample(job, at)
        if kind in ("Succeeded", "Failed"):
            self._release(job)
            job.finished_s = at
            self._set(job, phase=kind, reason=kind, completionTime=rfc3339(at),
                      message=getattr(event, "message", None) or None, queuePosition=None)
            return
        # ChipFailed: stop from the last checkpoint, then RestartAll / Fail per the spec.
        stopped = self.b.runtime.stop(job.key)
        self._close_attempt(job, stopped)
        self._release(job)
        policy = job.spec.model_dump(by_alias=True).get("failurePolicy", "RestartAll")
        if str(policy).endswith("Fail"):
            job.finished_s = now
            self._set(job, phase="Failed", reason="ChipFailed", completionTime=rfc3339(now),
                      message=getattr(event, "message", "a chip failed"))
            return
        self._set(job, phase="Pending", reason="ChipFailed", allocation=None,
                  restarts=int(job.status.get("restarts", 0)) + 1)
        self.submit(job)

    def _preempted(self, job: JobState, by: str, now: float) -> None:
        """The Scheduler requeued the whole job (every replica); stop it and say who."""
        if job.running:
            self._sample(job, now)
            self._close_attempt(job, self.b.runtime.stop(job.key))
        job.held.clear()
        by_job = self._by_sched_key(by)
        by_name = f"{by_job.namespace}/{by_job.name}" if by_job else by
        self._set(job, phase="Preempted", reason="Preempted", allocation=None,
                  message=f"preempted by {by_name}",
                  preemptions=int(job.status.get("preemptions", 0)) + 1)

    def _admitted(self, job: JobState, admitted: Admitted, now: float) -> None:
        """Every gang of the job placed at once (all replicas of an InferenceJob)."""
        for key, placement in zip(job.sched_keys, admitted.placements, strict=True):
            job.held[key] = list(placement.chip_ids)
        if job.kind == "TrainingJob":
            placement = admitted.placements[0]
            allocation: dict[str, Any] = {
                "ultraServers": list(placement.ultraservers), "servers": list(placement.servers),
                "chips": list(placement.chip_ids), "level": str(placement.level),
                "score": float(placement.score),
            }
        else:
            allocation = {"replicas": [
                {"index": i, "ultraServers": list(p.ultraservers), "servers": list(p.servers),
                 "chips": list(p.chip_ids)} for i, p in enumerate(admitted.placements)]}
        self._set(job, allocation=allocation, admittedTime=rfc3339(now), queuePosition=None,
                  attempt=int(job.status.get("attempt", 0)) + 1)
        self._start(job, now)

    def _start(self, job: JobState, now: float, *, restarted: bool = False) -> None:
        chips = [c for key in job.sched_keys for c in job.held[key]]
        resume = job.checkpointed_steps if job.kind == "TrainingJob" else 0
        try:
            self.b.runtime.start(job.key, job.spec, chips, resume_steps=resume)
        except Exception as exc:  # a spec the runtime cannot run fails that job, not the API
            log.warning("runtime rejected %s: %s", job.key, exc)
            self._release(job)
            job.finished_s = now
            self._set(job, phase="Failed", reason="RuntimeRejected", message=str(exc))
            return
        job.started_s = job.started_s if job.started_s is not None else now
        job.last_sample_s = now
        self._set(job, phase="Running", reason="Restarted" if restarted else "Running",
                  message=None, startTime=job.status.get("startTime") or rfc3339(now))

    def _failed(self, job: JobState, failed: Failed) -> None:
        """The driver took it out of the queue (Unsatisfiable: it can never fit the fleet)."""
        job.held.clear()
        job.finished_s = None
        self._set(job, phase="Failed", reason=failed.reason, message=failed.message,
                  queuePosition=None)

    def _pending(self, job: JobState, waiting: Pending) -> None:
        position = waiting.position
        if job.phase == "Preempted":  # keep who preempted it; only the queue position moves
            if job.status.get("queuePosition") != position:
                self._set(job, queuePosition=position)
            return
        if (job.status.get("queuePosition") != position
                or job.status.get("message") != waiting.message):
            self._set(job, phase="Pending", queuePosition=position, reason=waiting.reason,
                      message=waiting.message)

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
        job.checkpointed_steps = max(job.checkpointed_steps,
                                     int(getattr(status, "checkpointed_steps", 0) or 0))
        progress = {"completedSteps": int(getattr(status, "completed_steps", 0) or 0),
                    "checkpointedSteps": job.checkpointed_steps,
                    "percent": round(float(getattr(status, "progress_percent", 0.0)), 3)}
        fields: dict[str, Any] = {
            "progress": progress, "progressPercent": progress["percent"],
            "utilization": round(float(getattr(status, "utilization", 0.0)), 4),
            "powerWatts": round(float(getattr(status, "power_watts", 0.0)), 1),
            "energyKWh": round(job.energy_kwh, 6),
        }
        if job.kind == "InferenceJob":
            for wire, attr in (("tokensPerSecond", "tokens_per_second"),
                               ("p50LatencyMs", "p50_latency_ms"), ("sloMet", "slo_met"),
                               ("tokensPerMegawatt", "tokens_per_megawatt")):
                value = getattr(status, attr, None)
                if value is not None:
                    fields[wire] = round(value, 1) if wire == "tokensPerSecond" else value
        job.status.update(fields)

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
        self.b.admissions.withdraw(job.key)
        job.held.clear()

    def remove(self, job: JobState, now: float) -> None:
        """Delete: stop it, give its chips back; accounting keeps what it used."""
        if job.running:
            self._sample(job, now)
            self._close_attempt(job, self.b.runtime.stop(job.key))
        self._release(job)
        if not job.finished:
            job.finished_s = now if job.started_s is not None else None
            self._set(job, phase="Deleted")

    def accounting_of(self, job: JobState) -> tuple[AccountingCreate, dict[str, tuple[float, float]]]:
        """The job's accounting row and per-day usage, as of its last sample."""
        phase = job.phase
        done = phase in ("Succeeded", "Failed")
        completion = None
        if done and job.finished_s is not None:
            completion = max(0.0, job.finished_s - job.created_s)
        record = AccountingCreate(
            job_uid=job.uid, kind=job.kind, namespace=job.namespace, name=job.name,
            chips=job.chips, phase=phase, submitted_s=job.created_s, started_s=job.started_s,
            finished_s=job.finished_s,
            chip_hours=sum(v[0] for v in job.days.values()),
            energy_kwh=sum(v[1] for v in job.days.values()),
            completion_time_s=completion,
        )
        return record, {d: (v[0], v[1]) for d, v in job.days.items()}
