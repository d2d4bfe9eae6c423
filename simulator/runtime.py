"""The in-process runtime: admitted jobs executed on virtual chips in simulated time.

Why it exists: the REST API's embedded fleet and cluster mode both need a data
plane that "runs" jobs without hardware. Callers own admission (the scheduler)
and hand this runtime the chips a job got; the runtime owns progress,
checkpoints, utilisation, power and energy. Time comes only from the injected
`clock` (wall seconds): simulated time = clock at creation + wall elapsed x
`time_scale`, so with time_scale 1 simulated instants are real timestamps.

Each attempt is computed in closed form from its start (restart cost, then
cycles of `checkpointIntervalSeconds` of work and one checkpoint write), so
`advance()` costs O(running jobs) however much time passed, and energy is
exact for jobs that ended between two advances.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ultraplane.simulator.fleets import FleetShape
from ultraplane.simulator.models import DEFAULT_ASSUMPTIONS, Assumptions
from ultraplane.simulator.plans import Plan, plan_job, under_cap

from ultraplane.documents.jobspecs import read_work
from ultraplane.ids import kind_of_job_key

Phase = Literal["Running", "Succeeded"]  # a chip failure halts a job; the core decides Failed


@dataclass(frozen=True)
class JobEvent:
    key: str
    kind: Literal["Succeeded", "ChipFailed"]
    t_s: float
    message: str


@dataclass(frozen=True)
class JobRuntimeStatus:
    phase: Phase
    progress_percent: float
    completed_steps: int
    checkpointed_steps: int
    utilization: float
    power_watts: float
    energy_kwh: float
    tokens_per_second: float | None
    start_time_s: float
    end_time_s: float | None
    total_steps: int = 0
    p50_latency_ms: float | None = None
    slo_met: bool | None = None
    tokens_per_megawatt: float | None = None
    message: str = ""
    chip_hours: float = 0.0  # every attempt of the key, simulated time (as energy_kwh)


@dataclass(frozen=True)
class FleetStatus:
    power_watts: float
    utilization: float
    energy_kwh: float
    per_ultraserver: dict[str, tuple[float, float]] = field(default_factory=dict)


class _Attempt:
    __slots__ = ("base", "began", "cap", "chip_hours_before", "chips", "end", "energy_before_j",
                 "halted", "key", "phase", "plan", "resume", "start", "status_msg")

    def __init__(self, key: str, plan: Plan, chips: tuple[str, ...], start: float, resume: int,
                 energy_before_j: float, chip_hours_before: float = 0.0) -> None:
        self.key, self.plan, self.chips, self.start, self.resume = key, plan, chips, start, resume
        self.energy_before_j = energy_before_j
        self.chip_hours_before = chip_hours_before
        self.phase: Phase = "Running"
        self.end: float | None = None  # when it stopped drawing busy power
        self.halted = False  # lost a chip; frozen at its checkpoint until stopped
        self.status_msg = ""
        # A power cap re-bases the attempt (`start`, `resume`, `plan` from `base`, the uncapped
        # plan); `began` keeps when it really started.
        self.base, self.began = plan, start
        self.cap: float | None = None


class JobRuntime:
    """Virtual chips running admitted jobs; see the module docstring for the time model."""

    def __init__(self, topology: Any, *, clock: Callable[[], float], time_scale: float = 1.0,
                 assumptions: Assumptions = DEFAULT_ASSUMPTIONS) -> None:
        if time_scale <= 0:
            raise ValueError("time_scale must be positive")
        self.shape = FleetShape.of(topology)
        self.assumptions = assumptions
        self._clock, self._scale = clock, time_scale
        self._wall0 = clock()
        self._last = self._wall0  # simulated time of the last advance
        self._jobs: dict[str, _Attempt] = {}
        self._carry_j: dict[str, float] = {}  # energy of earlier attempts of a key
        self._carry_ch: dict[str, float] = {}  # chip-hours of earlier attempts of a key
        self._failed: set[str] = set(self.shape.failed)
        self._pending: list[JobEvent] = []
        self._fleet_j = 0.0
        self._chip_job: dict[str, str] = {}

    def reshape(self, topology: Any) -> None:
        """Adopt a new set of UltraServers (cluster mode sees them come and go); jobs keep running."""
        self._catch_up()
        self.shape = FleetShape.of(topology)

    # -- time ------------------------------------------------------------------------
    def now(self) -> float:
        """Simulated seconds (same origin as the clock)."""
        return self._wall0 + (self._clock() - self._wall0) * self._scale

    # -- commands --------------------------------------------------------------------
    def start(self, key: str, spec: Any, chip_ids: Sequence[str], *, resume_steps: int = 0,
              kind: str | None = None) -> None:
        """Run `spec` (wire form or pydantic model) on `chip_ids` from `resume_steps` (a
        checkpoint); restarts a stopped key. `kind`: the job's, read from a job key
        (`tj/...`, `ij/...`) when not given; the spec is read by the core's reader."""
        self._catch_up()
        if key in self._jobs:
            self.stop(key)  # a restart: carry the energy of the earlier attempt
        chips = tuple(chip_ids)
        if not chips:
            raise ValueError(f"job {key} was started without chips")
        for c in chips:
            if c.partition("/")[0] not in self.shape.chips_of:
                raise ValueError(f"chip {c!r} is not in this fleet")
        work = read_work(kind or kind_of_job_key(key), spec)
        plan = plan_job(work, chips, self.shape, self.assumptions)
        resume = max(0, min(int(resume_steps), plan.total_steps))
        carry = self._carry_j.pop(key, 0.0)
        self._jobs[key] = _Attempt(key, plan, chips, self._last, resume, carry,
                                   self._carry_ch.pop(key, 0.0))
        for c in chips:
            self._chip_job[c] = key

    def set_cap(self, key: str, cap_w: float | None) -> None:
        """Cap a running job's chips at `cap_w` watts each (None lifts the cap): from now it
        draws less and runs slower (`plans.under_cap`). Its work so far is kept; checkpoints
        are counted from the change on (an approximation: work since the last checkpoint
        counts as saved)."""
        job = self._jobs.get(key)
        if job is None or job.cap == cap_w:  # (the cluster simulator asks on every event)
            return
        self._catch_up()
        if job.end is not None or job.halted:
            return
        t = self._last
        done, _ = self._progress(job, t)
        busy_s = max(0.0, t - job.start)
        job.energy_before_j += job.plan.busy_watts * busy_s
        job.chip_hours_before += len(job.chips) * busy_s / 3600.0
        plan = under_cap(job.base, cap_w, self.shape)
        if job.plan.duration_s is not None:  # an inference run keeps its end of service
            plan = replace(plan, duration_s=max(0.0, job.plan.duration_s - busy_s))
        job.plan, job.start, job.resume, job.cap = plan, t, done, cap_w

    def stop(self, key: str) -> JobRuntimeStatus | None:
        """Stop a job (preempted or deleted); its status keeps the last checkpoint."""
        job = self._jobs.get(key)
        if job is None:
            return None
        self._catch_up()
        if job.end is None:
            job.end = self._last
        status = self.status(key)
        self._carry_j[key] = status.energy_kwh * 3.6e6
        self._carry_ch[key] = status.chip_hours
        self._release(job)
        del self._jobs[key]
        return status

    def fail_chip(self, chip_id: str) -> list[str]:
        """Mark a chip failed; a job on it halts at its last checkpoint.

        The runtime reports `ChipFailed` and leaves the consequence to the core's decision
        (`Admissions.chip_failed`, which applies the job's failure policy once): the job stays
        frozen until the caller stops it and, if the core places it again, starts it on new
        chips with `resume_steps`. The runtime never decides `Failed` itself.
        """
        self._catch_up()
        self._failed.add(chip_id)
        key = self._chip_job.get(chip_id)
        if key is None or key not in self._jobs:
            return []
        job = self._jobs[key]
        if job.end is not None:
            return []
        job.end, job.halted = self._last, True
        done = self._progress(job, self._last)
        job.status_msg = f"chip {chip_id} failed; halted at checkpoint step {done[1]}"
        self._pending.append(JobEvent(key, "ChipFailed", self._last, job.status_msg))
        self._release(job)
        return [key]

    def repair_chip(self, chip_id: str) -> None:
        self._failed.discard(chip_id)

    def advance(self) -> list[JobEvent]:
        """Bring every job to `clock()`; returns what happened since the last call."""
        self._catch_up()
        events, self._pending = self._pending, []
        return sorted(events, key=lambda e: e.t_s)

    def _catch_up(self) -> None:
        """Finish jobs whose last step is due; events wait in `_pending` for `advance`."""
        now = self.now()
        for job in self._jobs.values():
            after = job.plan.finish_after(job.resume) if job.end is None else None
            if after is not None and job.start + after <= now:
                job.end, job.phase = job.start + after, "Succeeded"
                self._pending.append(JobEvent(job.key, "Succeeded", job.end, "all work done"))
                self._release(job)
        self.advance_energy(now)

    def advance_energy(self, now: float | None = None) -> None:
        now = self.now() if now is None else now
        if now <= self._last:
            return
        extra = 0.0
        for job in self._jobs.values():
            lo, hi = max(job.start, self._last), min(job.end if job.end is not None else now, now)
            if hi > lo:
                extra += job.plan.extra_watts * (hi - lo)
        self._fleet_j += self.shape.idle_watts() * (now - self._last) + extra
        self._last = now

    def _release(self, job: _Attempt) -> None:
        for c in job.chips:
            if self._chip_job.get(c) == job.key:
                del self._chip_job[c]

    # -- queries -------------------------------------------------------------------------
    def _progress(self, job: _Attempt, t: float) -> tuple[int, int]:
        return job.plan.progress(t - job.start, job.resume)

    def status(self, key: str) -> JobRuntimeStatus:
        """The job's phase, progress, power and energy at the last `advance()`."""
        job = self._jobs.get(key)
        if job is None:
            raise KeyError(f"no job {key!r} in the runtime")
        plan, t = job.plan, self._last
        running = job.end is None
        t_eff = t if running else job.end
        assert t_eff is not None
        completed, ckpt = self._progress(job, t_eff)
        if job.halted:
            completed = ckpt
        if job.phase == "Succeeded":
            completed = ckpt = plan.total_steps
        busy_s = max(0.0, t_eff - job.start)
        energy_j = job.energy_before_j + plan.busy_watts * busy_s
        pct = 100.0 * completed / plan.total_steps if plan.total_steps else (100.0 if job.phase == "Succeeded" else 0.0)
        return JobRuntimeStatus(
            phase=job.phase, progress_percent=round(pct, 3), completed_steps=completed,
            checkpointed_steps=ckpt, utilization=plan.utilization if running else 0.0,
            power_watts=plan.busy_watts if running else 0.0, energy_kwh=energy_j / 3.6e6,
            tokens_per_second=plan.tokens_per_s, start_time_s=job.began,
            end_time_s=None if running or job.halted else job.end, total_steps=plan.total_steps,
            p50_latency_ms=plan.latency_ms, slo_met=plan.slo_met,
            tokens_per_megawatt=plan.tokens_per_megawatt, message=job.status_msg,
            chip_hours=job.chip_hours_before + len(job.chips) * busy_s / 3600.0,
        )

    def keys(self) -> list[str]:
        return list(self._jobs)

    def __contains__(self, key: object) -> bool:
        return key in self._jobs

    def chip_states(self, ultraserver: str) -> list[tuple[str, str | None, float, float, bool]]:
        """(chip id, job, utilisation, watts, failed) for each chip of one UltraServer."""
        hw = self.shape.hardware_of[ultraserver]
        out = []
        for c in self.shape.chip_ids_of(ultraserver):
            key = self._chip_job.get(c)
            job = self._jobs.get(key) if key else None
            running = job is not None and job.end is None
            util = job.plan.utilization if job is not None and running else 0.0
            watts = hw.idle_watts
            if job is not None and running and job.plan.per_us.get(ultraserver):
                # the plan's draw (under a cap, if any), as fleet() sums it
                watts += job.plan.extra_watts_of[ultraserver] / job.plan.per_us[ultraserver]
            out.append((c, key, util, watts, c in self._failed))
        return out

    def fleet(self) -> FleetStatus:
        """Fleet power (idle + busy chips), mean chip utilisation, energy since start."""
        per_us: dict[str, list[float]] = {n: [0.0, 0.0] for n in self.shape.names}
        for job in self._jobs.values():
            if job.end is None:
                for name, n in job.plan.per_us.items():
                    if name not in per_us:
                        continue  # its UltraServer left the fleet
                    per_us[name][0] += n * job.plan.utilization
                    per_us[name][1] += job.plan.extra_watts_of[name]
        total_util = 0.0
        power = 0.0
        result: dict[str, tuple[float, float]] = {}
        for name in self.shape.names:
            chips = self.shape.chips_of[name]
            p = self.shape.hardware_of[name].idle_watts * chips + per_us[name][1]
            result[name] = (per_us[name][0] / chips, p)
            total_util += per_us[name][0]
            power += p
        util = total_util / self.shape.total_chips if self.shape.total_chips else 0.0
        return FleetStatus(power, util, self._fleet_j / 3.6e6, result)
