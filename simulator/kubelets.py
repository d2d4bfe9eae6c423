"""The virtual kubelet's decisions, free of any Kubernetes client.

Why split from `cluster`: what to start, stop or restart given the objects in
the API server, and which status fields to write, is the logic worth testing;
`cluster` only lists objects, feeds them here and sends the patches back.
Level-triggered: every heartbeat compares the listed objects with what the
runtime runs, so a missed watch event or a restart of the simulator heals on
the next pass.

Ownership (docs/resources.md): the simulator writes a job's phase Running /
Succeeded / Failed, startTime, completionTime, progress, progressPercent,
utilization, powerWatts, energyKWh (and the inference figures), and an
UltraServer's chips, utilization, powerWatts, energyKWh and heartbeatTime.
It never writes allocation, queuePosition, attempt, conditions or capacity.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ultraplane.simulator.runtime import JobRuntime, JobRuntimeStatus

from ultraplane.documents import conversions
from ultraplane.documents.jobstatuses import runtime_conditions
from ultraplane.hardware.topology import Topology, UltraServer
from ultraplane.ids import job_key, local_ref, parse_chip_id

ACTIVE = conversions.HOLDING_PHASES


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _get(body: Mapping[str, Any], *path: str) -> Any:
    cur: Any = body
    for p in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(p)
    return cur


def allocated_chips(body: Mapping[str, Any]) -> tuple[str, ...]:
    """Chip ids of a job's allocation (inference: every replica's chips, once)."""
    return conversions.allocated_chips(body.get("status") or {})


def ultraserver_of(body: Mapping[str, Any]) -> UltraServer | None:
    """The core UltraServer of a body, or None for one the schema would not admit."""
    try:
        return conversions.ultraserver_from_body(body)[0]
    except ValueError:
        return None


def _conditions(current: list[Mapping[str, Any]], s: JobRuntimeStatus, now: float) -> list[dict[str, Any]]:
    """The operator's conditions as they are, plus the runtime's Running and Finished, from the
    core's one status builder (the embedded REST backend writes the very same)."""
    return runtime_conditions({"conditions": current}, s.phase, s.message or None,
                              datetime.fromtimestamp(now, tz=UTC))


@dataclass
class Tracked:
    kind: str
    namespace: str
    name: str
    ident: tuple[Any, tuple[str, ...]]  # (status.attempt, chips) of the running attempt
    start_wall: float
    final_sent: bool = False
    body: Mapping[str, Any] | None = None  # as last listed: its conditions and resourceVersion


@dataclass(frozen=True)
class Patch:
    kind: str  # TrainingJob | InferenceJob | UltraServer
    namespace: str | None
    name: str
    body: dict[str, Any]


class VirtualKubelet:
    """Maps listed objects onto a `JobRuntime` and the runtime back onto status patches."""

    def __init__(self, *, clock: Callable[[], float], time_scale: float = 1.0) -> None:
        self.clock = clock
        self.runtime = JobRuntime(Topology(()), clock=clock, time_scale=time_scale)
        self.jobs: dict[str, Tracked] = {}
        self.failed: set[str] = set()
        self.us_energy_j: dict[str, float] = {}
        self._names: tuple[str, ...] = ()
        self._last_sim = self.runtime.now()
        self.events_total: dict[str, int] = {}

    # -- inputs --------------------------------------------------------------------------
    def sync_ultraservers(self, bodies: Iterable[Mapping[str, Any]]) -> None:
        servers = [u for u in map(ultraserver_of, bodies) if u is not None]
        if tuple(sorted(f"{u.name}:{u.profile}:{u.servers}" for u in servers)) != self._names:
            self._names = tuple(sorted(f"{u.name}:{u.profile}:{u.servers}" for u in servers))
            self.runtime.reshape(Topology(tuple(servers)))
        failed = {f"{u.name}/{ref}" for u in servers for ref in u.failed_chips}
        for chip in sorted(failed - self.failed):
            self.runtime.fail_chip(chip)
        for chip in self.failed - failed:
            self.runtime.repair_chip(chip)
        self.failed = failed

    def sync_jobs(self, bodies: Iterable[Mapping[str, Any]]) -> list[Patch]:
        """Start, restart or stop jobs to match the listed objects; returns failure patches."""
        seen: set[str] = set()
        out: list[Patch] = []
        for body in bodies:
            meta = body["metadata"]
            key = job_key(str(body.get("kind", "TrainingJob")), meta["namespace"], meta["name"])
            seen.add(key)
            phase = _get(body, "status", "phase")
            chips = allocated_chips(body)
            tracked = self.jobs.get(key)
            # a job with a pod template runs as pods (the operator's pod data plane), not here
            if phase not in ACTIVE or not chips or _get(body, "spec", "template"):
                if tracked is not None:
                    self._forget(key)
                continue
            ident = (_get(body, "status", "attempt"), chips)
            if tracked is not None:
                tracked.body = body
            if tracked is not None and tracked.ident == ident:
                tracked.final_sent = False  # the object still looks active: (re)send our status
                self.runtime.set_cap(key, _cap(body))  # a PowerBudget's cap, if the operator set one
                continue
            resume = int(_get(body, "status", "progress", "checkpointedSteps") or 0)
            if key in self.runtime:  # a new attempt or allocation: resume from checkpoint
                stopped = self.runtime.stop(key)  # the runtime carries its energy over
                if stopped is not None:
                    resume = max(resume, stopped.checkpointed_steps)
            kind = str(body.get("kind", "TrainingJob"))
            try:
                self.runtime.start(key, body.get("spec") or {}, chips, resume_steps=resume)
            except (ValueError, KeyError) as exc:
                out.append(Patch(kind, meta["namespace"], meta["name"], {"status": {
                    "phase": "Failed", "message": f"simulator cannot run it: {exc}",
                    "completionTime": _iso(self.clock())}}))
                continue
            self.runtime.set_cap(key, _cap(body))
            self.jobs[key] = Tracked(kind, meta["namespace"], meta["name"], ident, self.clock(),
                                     body=body)
        for gone in [k for k in self.jobs if k not in seen]:
            self._forget(gone)
        return out

    def _forget(self, key: str) -> None:
        self.runtime.stop(key)
        del self.jobs[key]

    # -- outputs -------------------------------------------------------------------------
    def tick(self) -> list[Patch]:
        """Advance the runtime; the status patches of every running job and UltraServer."""
        for ev in self.runtime.advance():
            self.events_total[ev.kind] = self.events_total.get(ev.kind, 0) + 1
        now = self.clock()
        patches = [self._job_patch(t, self.runtime.status(k), now) for k, t in self.jobs.items()
                   if not t.final_sent]
        for key, t in self.jobs.items():
            if self.runtime.status(key).phase != "Running":
                t.final_sent = True  # resent by sync_jobs if the object still says Running
        return patches + self._ultraserver_patches(now)

    def _job_patch(self, t: Tracked, s: JobRuntimeStatus, now: float) -> Patch:
        status: dict[str, Any] = {
            "phase": s.phase, "startTime": _iso(t.start_wall),
            "progressPercent": round(s.progress_percent, 3), "utilization": round(s.utilization, 4),
            "powerWatts": round(s.power_watts, 1), "energyKWh": round(s.energy_kwh, 6),
            "chipHours": round(s.chip_hours, 6),  # simulated time, as energyKWh
        }
        if t.kind == "TrainingJob":
            status["progress"] = {"completedSteps": s.completed_steps,
                                  "checkpointedSteps": s.checkpointed_steps,
                                  "percent": round(s.progress_percent, 3)}
        else:
            tps = None if s.tokens_per_second is None else round(s.tokens_per_second, 1)
            status.update({"tokensPerSecond": tps, "p50LatencyMs": s.p50_latency_ms,
                           "sloMet": s.slo_met, "tokensPerMegawatt": s.tokens_per_megawatt})
        if s.phase != "Running":
            status["completionTime"] = _iso(now)
        if s.message:
            status["message"] = s.message
        body: dict[str, Any] = {"status": status}
        if t.body is not None:
            # conditions is a list: a merge patch replaces it whole, so write it back with the
            # operator's entries kept, guarded by resourceVersion (409 -> next heartbeat)
            status["conditions"] = _conditions(_get(t.body, "status", "conditions") or [], s, now)
            rv = _get(t.body, "metadata", "resourceVersion")
            if rv:
                body["metadata"] = {"resourceVersion": rv}
        return Patch(t.kind, t.namespace, t.name, body)

    def _ultraserver_patches(self, now: float) -> list[Patch]:
        fleet = self.runtime.fleet()
        sim_now = self.runtime.now()
        dt = max(0.0, sim_now - self._last_sim)
        self._last_sim = sim_now
        out = []
        for name, (util, watts) in fleet.per_ultraserver.items():
            self.us_energy_j[name] = self.us_energy_j.get(name, 0.0) + watts * dt
            chips = []
            for chip, job, u, w, failed in self.runtime.chip_states(name):
                _, server, c = parse_chip_id(chip)
                chips.append({"id": local_ref(server, c), "job": job, "utilization": round(u, 4),
                              "powerWatts": round(w, 1), "failed": failed})
            out.append(Patch("UltraServer", None, name, {"status": {
                "chips": chips, "utilization": round(util, 4), "powerWatts": round(watts, 1),
                "energyKWh": round(self.us_energy_j[name] / 3.6e6, 6), "heartbeatTime": _iso(now)}}))
        return out


def _cap(body: Mapping[str, Any]) -> float | None:
    """The per-chip power cap the operator wrote for a job (`status.powerCapWatts`)."""
    cap = _get(body, "status", "powerCapWatts")
    return float(cap) if isinstance(cap, int | float) and not isinstance(cap, bool) else None
