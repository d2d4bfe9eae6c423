"""The virtual kubelet's decisions, free of any Kubernetes client.

Why split from `cluster`: what to start, stop or restart given the objects in
the API server, and which status fields to write, is the logic worth testing;
`cluster` only lists objects, feeds them here and sends the patches back.
Level-triggered: every heartbeat compares the listed objects with what the
runtime runs, so a missed watch event or a restart of the simulator heals on
the next pass.

Ownership (docs/resources.md): the simulator writes a job's phase Running /
Succeeded / Failed, startTime, completionTime, progress, progressPercent,
utilization, powerWatts, energyKWh, chipHours (and the inference figures), its Running and
Finished conditions, and an UltraServer's chips, utilization, powerWatts, energyKWh and
heartbeatTime; a job's fields come from the core's one status builder (`jobstatuses.ran`,
`jobstatuses.measured`). It never writes allocation, queuePosition, attempt, the operator's
conditions or capacity.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ultraplane.simulator.runtime import JobRuntime, JobRuntimeStatus

from ultraplane.documents import conversions, jobstatuses
from ultraplane.hardware.topology import Topology, UltraServer
from ultraplane.ids import job_key, local_ref, parse_chip_id

ACTIVE = conversions.HOLDING_PHASES


def _iso(t: float) -> str:
    return jobstatuses.stamp(_moment(t))


def _moment(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


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
                self.runtime.start(key, body.get("spec") or {}, chips, resume_steps=resume,
                                   kind=kind)
            except (ValueError, KeyError) as exc:
                failed = jobstatuses.ran(body.get("status") or {}, "Failed",
                                         f"simulator cannot run it: {exc}", _moment(self.clock()))
                out.append(_patch(kind, meta["namespace"], meta["name"], body, failed))
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
        """What the runtime says of a job, through the core's one status builder (the embedded
        REST backend writes the very same): its phase and conditions (the operator's kept),
        since when this attempt runs, and its figures."""
        current = _get(t.body or {}, "status") or {}
        status = {**jobstatuses.ran(current, s.phase, s.message or None, _moment(now),
                                    started=_moment(t.start_wall)),
                  **jobstatuses.measured(t.kind, s)}
        return _patch(t.kind, t.namespace, t.name, t.body, status)

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


def _patch(kind: str, namespace: str, name: str, body: Mapping[str, Any] | None,
           status: dict[str, Any]) -> Patch:
    """A job's status patch. Its conditions are a list, which a merge patch replaces whole: it
    is written back with the operator's entries kept, guarded by the resourceVersion it was
    built from (409 -> the next heartbeat builds it again)."""
    patch: dict[str, Any] = {"status": status}
    rv = _get(body or {}, "metadata", "resourceVersion")
    if rv:
        patch["metadata"] = {"resourceVersion": rv}
    return Patch(kind, namespace, name, patch)


def _cap(body: Mapping[str, Any]) -> float | None:
    """The per-chip power cap the operator wrote for a job (`status.powerCapWatts`)."""
    cap = _get(body, "status", "powerCapWatts")
    return float(cap) if isinstance(cap, int | float) and not isinstance(cap, bool) else None
