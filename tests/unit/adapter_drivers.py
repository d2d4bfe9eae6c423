"""Three drivers that play one scripted scenario through the three adapters of the core.

A script is a list of `(t seconds, action)`: jobs arrive, a chip under a job fails, a pod of a
job fails, a job is deleted, or time just passes. Each driver plays it its own way, as a user
of that adapter would:

- `OperatorDriver`: the operator's `Controller` on an in-memory API server (`FakeKube`), with
  the cluster simulator's `VirtualKubelet` running the admitted jobs and writing what it says
  (Running, Succeeded); a chip fails as an UltraServer watch event with `spec.failedChips`.
  With `pods=True` it runs the pod data plane too (`PodPlane`, on in-memory pods and Nodes
  that start every pod at once): a job with a pod template runs as pods, and a pod fails as
  its watch event says `Failed`.
- `EmbeddedDriver`: the embedded REST backend (`ultraplane serve`'s), SQLite, the same clock;
  a chip fails through `patch_ultraserver` (what `PATCH /v1/ultraservers/{name}` calls). It runs
  no pods: a failed pod is, to it, the pod's chips lost to the job for an instant (failed, then
  repaired in the same step), which is what a failed pod is to the core too.
- `replay_at`: the trace replay, its jobs a trace, its chip failures scripted faults on the
  chips the other adapters name (deletions have no meaning in a replay).

After each step a driver reports what it decided (`Seen`: state and chips per job) and, for
the operator and the embedded API, the status documents, projected on the fields the core's
decisions and its status builder own (`project`).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ultraplane.api.backends.embedded import EmbeddedBackend
from ultraplane.api.settings import Settings
from ultraplane.api.store import make_engine, migrate
from ultraplane.api.ultraserverpatches import UltraServerPatch
from ultraplane.operator.controllers import Controller
from ultraplane.operator.kube import Gone
from ultraplane.operator.pods import PodPlane, pod_info
from ultraplane.simulator.faults import FaultPlan
from ultraplane.simulator.kubelets import VirtualKubelet
from ultraplane.simulator.replay import Replay, ReplayConfig
from ultraplane.simulator.traces import TraceJob

from tests.unit.operator_fakes import FakeKube
from ultraplane.hardware.topology import build_fleet
from ultraplane.ids import local_ref, parse_chip_id
from ultraplane.pods.nodelabels import DEFAULT_LABELS
from ultraplane.resources import InferenceJobSpec, TrainingJobSpec

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
SERVERS = 2  # Trn3 Gen2 UltraServers gen2-0000 and gen2-0001, both in block-000
SERVERS_PER_ULTRASERVER = 36  # of 4 chips each
TEMPLATE = {"spec": {"containers": [{"name": "worker", "image": "trainer:1"}]}}

Outcome = tuple[str, tuple[str, ...]]  # ("running", chips) | ("waiting" | "failed" | "finished", ())
Seen = dict[str, Outcome]


@dataclass(frozen=True)
class Job:
    name: str
    chips: int  # per replica for an InferenceJob
    priority: int = 0
    replicas: int | None = None  # an InferenceJob of `replicas` x `chips`
    level: str = "ultraserver"
    duration: int = 36_000  # seconds (an integer, as the CRD wants it)
    policy: str = "RestartAll"  # a TrainingJob's failurePolicy
    pods: bool = False  # with a pod template: the operator's pod data plane runs it

    @property
    def plural(self) -> str:
        return "trainingjobs" if self.replicas is None else "inferencejobs"

    @property
    def order(self) -> tuple[str, str]:
        """Creation order inside one instant: the key's (`ij/...` before `tj/...`, then the
        name), which is how jobs created in the same second rank in every adapter."""
        return ("tj" if self.replicas is None else "ij", self.name)

    def spec(self) -> dict[str, Any]:
        template = {"template": copy.deepcopy(TEMPLATE)} if self.pods else {}
        if self.replicas is None:
            return {"chips": self.chips, "priority": self.priority, "failurePolicy": self.policy,
                    "topology": {"requiredLevel": self.level},
                    "work": {"durationSeconds": self.duration}, **template}
        return {"replicas": self.replicas, "chipsPerReplica": self.chips,
                "priority": self.priority, "topology": {"requiredLevel": self.level},
                "model": {"name": "llama-3-70b", "parametersBillions": 70},
                "load": {"requestsPerSecond": 10}, "durationSeconds": self.duration, **template}


@dataclass(frozen=True)
class Arrive:
    jobs: tuple[Job, ...]


@dataclass(frozen=True)
class FailChip:
    """The first chip (in sorted order) of the job's allocation, or of its replica, fails."""

    job: str
    replica: int = 0


@dataclass(frozen=True)
class FailPod:
    """The pod on the server of the job's first chip (or its replica's) fails."""

    job: str
    replica: int = 0


@dataclass(frozen=True)
class Delete:
    job: str


@dataclass(frozen=True)
class Wait:
    """Time passes (a job may finish)."""


Action = Arrive | FailChip | FailPod | Delete | Wait
Script = tuple[tuple[float, Action], ...]

# What the core's decisions and the status builder own; the runtime's figures (progress,
# power, energy, times of its own) are left out: the two runtimes sample at other moments.
FIELDS = ("phase", "reason", "message", "queuePosition", "allocation", "attempt", "restarts",
          "preemptions", "admittedTime", "chips")


RUNTIME_CONDITIONS = ("Running", "Finished")  # their times are when the runtime said so


def project(status: dict[str, Any]) -> dict[str, Any]:
    doc = {k: status[k] for k in FIELDS if status.get(k) is not None}
    doc["conditions"] = sorted(
        (c["type"], c["status"], c.get("reason"), c.get("message"),
         None if c["type"] in RUNTIME_CONDITIONS else c.get("lastTransitionTime"))
        for c in status.get("conditions") or [])
    return doc


def outcome(status: dict[str, Any]) -> Outcome:
    phase = str(status.get("phase") or "Pending")
    alloc = status.get("allocation") or {}
    chips = alloc.get("chips") or [c for r in alloc.get("replicas") or [] for c in r["chips"]]
    if phase in ("Admitted", "Running"):
        return ("running", tuple(sorted(chips)))
    assert not chips, f"a job that holds no chips names some: {phase} {chips}"
    return {"Failed": ("failed", ()), "Succeeded": ("finished", ())}.get(phase, ("waiting", ()))


def target(status: dict[str, Any], replica: int) -> str:
    """The chip a `FailChip` breaks, read from the job's status."""
    alloc = status["allocation"]
    chips = alloc["replicas"][replica]["chips"] if alloc.get("replicas") else alloc["chips"]
    return str(sorted(chips)[0])


def pod_chips(status: dict[str, Any], replica: int) -> list[str]:
    """The chips of the pod a `FailPod` breaks: those of the job (or its replica) on the
    server of the chip a `FailChip` would break."""
    alloc = status["allocation"]
    chips = alloc["replicas"][replica]["chips"] if alloc.get("replicas") else alloc["chips"]
    server = parse_chip_id(target(status, replica))[:2]
    return sorted(c for c in chips if parse_chip_id(c)[:2] == server)


class FakePods:
    """The pod data plane's calls, in memory, played by a kubelet that starts every pod at
    once: what changed waits in `events`, as the pod watch would deliver it."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[tuple[str, dict[str, Any]]] = []

    def create_pod(self, namespace: str, body: Mapping[str, Any]) -> None:
        pod = copy.deepcopy(dict(body))
        pod["status"] = {"phase": "Running"}
        self.pods[(namespace, pod["metadata"]["name"])] = pod
        self.events.append(("ADDED", copy.deepcopy(pod)))

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None) -> None:
        pod = self.pods.pop((namespace, name), None)
        if pod is None:
            raise Gone(name)
        self.events.append(("DELETED", pod))

    def label_pod(self, namespace: str, name: str, labels: Mapping[str, str]) -> None:
        pod = self.pods[(namespace, name)]
        pod["metadata"]["labels"].update(labels)
        self.events.append(("MODIFIED", copy.deepcopy(pod)))

    def fail(self, job: str, chips: list[str]) -> None:
        """The pod of `job` holding `chips` exits with an error."""
        pod = next(p for p in self.pods.values()
                   if (found := pod_info(p)) is not None and found[0].endswith(f"/{job}")
                   and sorted(found[1].chips) == chips)
        pod["status"] = {"phase": "Failed", "message": "exit code 1"}
        self.events.append(("MODIFIED", copy.deepcopy(pod)))

    def create_service(self, namespace: str, body: Mapping[str, Any]) -> None:
        pass

    def delete_service(self, namespace: str, name: str) -> None:
        pass


def iso(t_s: float) -> str:
    return datetime.fromtimestamp(t_s, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class OperatorDriver:
    def __init__(self, *, pods: bool = False) -> None:
        self.now = T0
        self.kube = FakeKube()
        self.kube.servers = [{"metadata": {"name": f"gen2-{i:04d}"},
                              "spec": {"profile": "trn3-gen2", "network": ["block-000"]}}
                             for i in range(SERVERS)]
        self.c = Controller(self.kube, clock=lambda: datetime.fromtimestamp(self.now, tz=UTC),
                            emit=lambda *a: None, batch_seconds=0, us_seconds=0,
                            position_seconds=0)
        self.kubelet = VirtualKubelet(clock=lambda: self.now)
        # Health reaches the kubelet once: a chip failure is the operator's to decide.
        self.kubelet.sync_ultraservers(self.kube.servers)
        self.failed: dict[str, list[str]] = {}
        self.loop = asyncio.new_event_loop()
        self.pods = FakePods()
        self.plane: PodPlane | None = None
        if pods:  # no launch backlog: every admission's pods are created at once
            self.plane = PodPlane(self.pods, self.c, backlog_seconds=0)  # type: ignore[arg-type]
            for us in (s["metadata"]["name"] for s in self.kube.servers):
                for i in range(SERVERS_PER_ULTRASERVER):
                    self.plane.observe_node({"metadata": {"name": f"{us}-n{i:02d}", "labels": {
                        DEFAULT_LABELS.ultraserver: us, DEFAULT_LABELS.server_index: str(i)}}})
        self.loop.run_until_complete(self.c.sync())

    def close(self) -> None:
        self.loop.close()
        if self.plane is not None:  # its API slots' threads
            self.plane._pool.shutdown(wait=False)

    def statuses(self) -> dict[str, dict[str, Any]]:
        return {name: copy.deepcopy(obj["status"]) for objs in self.kube.objects.values()
                for name, obj in objs.items()}

    def chip(self, action: FailChip) -> str:
        return target(self.statuses()[action.job], action.replica)

    def step(self, t: float, action: Action) -> None:
        self.now = T0 + t
        if isinstance(action, Arrive):
            for job in sorted(action.jobs, key=lambda j: j.order):
                self.kube._add(job.plural, job.name, job.spec(), {})
                obj = self.kube.objects[job.plural][job.name]
                obj["metadata"]["creationTimestamp"] = iso(self.now)
                self.c.observe_job(self.kube.bump(obj))
        elif isinstance(action, FailChip):
            us, _, ref = self.chip(action).partition("/")
            self.failed.setdefault(us, []).append(ref)
            self.c.observe_ultraserver({"metadata": {"name": us}, "spec": {
                "profile": "trn3-gen2", "network": ["block-000"],
                "failedChips": self.failed[us]}})
        elif isinstance(action, FailPod):
            self.pods.fail(action.job, pod_chips(self.statuses()[action.job], action.replica))
        elif isinstance(action, Delete):
            for objs in self.kube.objects.values():
                if action.job in objs:
                    self.c.observe_job(objs.pop(action.job), deleted=True)
        self.loop.run_until_complete(self._settle())

    async def _settle(self) -> None:
        """Kubelet rounds and cycles until nothing moves. The kubelet reports first, as its
        heartbeats do before a cycle (the cycle predicts ends from fresh progress); a
        victim's Pending write follows its eviction a cycle later."""
        for _ in range(4):
            await self._pod_rounds()
            self._kubelet_round()
            await self.c.run_cycle()
            await self.c.positions_written()
        await self._pod_rounds()

    async def _pod_rounds(self) -> None:
        """The pod data plane reconciles every job until its pods stop changing (a failed
        pod is handed to the core here, before the next cycle, as the plane's loop does)."""
        plane = self.plane
        if plane is None:
            return
        for _ in range(6):
            events, self.pods.events = self.pods.events, []
            plane.observe_pods(events)
            keys, plane.dirty = plane.dirty, set()
            for key in sorted(keys):
                await plane.reconcile(key)
            if not (self.pods.events or plane.dirty):
                return

    def _kubelet_round(self) -> None:
        bodies = [copy.deepcopy(o) for objs in self.kube.objects.values() for o in objs.values()]
        for patch in self.kubelet.sync_jobs(bodies) + self.kubelet.tick():
            plural = {"TrainingJob": "trainingjobs", "InferenceJob": "inferencejobs"}.get(
                patch.kind)
            obj = self.kube.objects.get(plural or "", {}).get(patch.name)
            if obj is None:
                continue
            for key, value in patch.body["status"].items():
                if value is None:
                    obj["status"].pop(key, None)
                else:
                    obj["status"][key] = copy.deepcopy(value)
            self.c.observe_job(self.kube.bump(obj))


class EmbeddedDriver:
    def __init__(self, tmp: Path) -> None:
        self.now = T0
        self.engine = make_engine(f"sqlite:///{tmp / 'agree.db'}")
        migrate(self.engine)
        self.b = EmbeddedBackend(
            Settings(db=str(self.engine.url), fleet=f"trn3-gen2:{SERVERS}", demo=False,
                     tick_seconds=3600.0, time_scale=1.0),
            self.engine, clock=lambda: self.now)
        self.b.start(background=False)

    def close(self) -> None:
        self.b.stop()
        self.engine.dispose()

    def statuses(self) -> dict[str, dict[str, Any]]:
        return {j.name: j.resource().model_dump(by_alias=True)["status"]
                for j in self.b.jobs.values()}

    def step(self, t: float, action: Action) -> None:
        self.now = T0 + t
        if isinstance(action, Arrive):
            for job in sorted(action.jobs, key=lambda j: j.order):
                if job.replicas is None:
                    self.b.create_job("TrainingJob", "ns", job.name,
                                      TrainingJobSpec.model_validate(job.spec()), {})
                else:
                    self.b.create_job("InferenceJob", "ns", job.name,
                                      InferenceJobSpec.model_validate(job.spec()), {})
        elif isinstance(action, FailChip):
            us, _, ref = target(self.statuses()[action.job], action.replica).partition("/")
            failed = sorted(self.b.allocator.topology.ultraserver(us).failed_chips | {ref})
            self.b.patch_ultraserver(us, UltraServerPatch.model_validate(
                {"spec": {"failedChips": failed}}))
        elif isinstance(action, FailPod):
            chips = pod_chips(self.statuses()[action.job], action.replica)
            us = parse_chip_id(chips[0])[0]
            before = sorted(self.b.allocator.topology.ultraserver(us).failed_chips)
            lost = {local_ref(*parse_chip_id(c)[1:]) for c in chips}
            for failed in (sorted(set(before) | lost), before):  # lost, then back at once
                self.b.patch_ultraserver(us, UltraServerPatch.model_validate(
                    {"spec": {"failedChips": failed}}))
        elif isinstance(action, Delete):
            job = next(j for j in self.b.jobs.values() if j.name == action.job)
            self.b.delete_job(job.kind, "ns", job.name)
        self.b.tick()


def replay_at(script: Script, faults: dict[int, str]) -> list[Seen]:
    """The replay's decisions just after each step's instant (`faults`: step index -> the chip
    the other adapters broke there). Training jobs only; the script must delete nothing."""
    jobs = [job for _, action in script if isinstance(action, Arrive) for job in action.jobs]
    assert all(j.replicas is None for j in jobs), "the replay schedules training jobs"
    assert not any(isinstance(a, Delete) for _, a in script), "a replay deletes nothing"
    trace = [TraceJob(job.name, t, float(job.duration), job.chips, priority=job.priority,
                      topology=job.level, line=n)
             for n, (t, job) in enumerate(sorted(
                 ((t, j) for t, a in script if isinstance(a, Arrive) for j in a.jobs),
                 key=lambda tj: (tj[0], tj[1].order)))]
    config = ReplayConfig(
        failure_policies=tuple((j.name, j.policy) for j in jobs),
        faults=FaultPlan(scripted=tuple((script[i][0], chip) for i, chip in faults.items())))
    result = Replay(build_fleet("trn3-gen2", SERVERS), trace, config).run()
    seen: list[Seen] = []
    for t, _ in script:
        held: dict[str, tuple[str, ...]] = {}
        for job_id, when, what, chips in result.placements:
            if when > t:
                break
            if what == "start":
                held[job_id] = tuple(sorted(chips))
            else:
                held.pop(job_id, None)
        now: Seen = {}
        for record in result.records:
            if record.submit_s > t:
                continue
            if record.job_id in held:
                now[record.job_id] = ("running", held[record.job_id])
            elif record.status == "rejected" or (
                    record.status == "failed" and (record.end_s or 0) <= t):
                now[record.job_id] = ("failed", ())
            elif record.status == "completed" and (record.end_s or 0) <= t:
                now[record.job_id] = ("finished", ())
            else:
                now[record.job_id] = ("waiting", ())
        seen.append(now)
    return seen
