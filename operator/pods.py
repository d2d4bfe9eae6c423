"""The pod data plane: an admitted job with a template runs as pods on the Nodes of its chips.

Why level-triggered on the job's status: the admission loop persists every decision in the job's
status (phase, attempt, allocation) before anything else happens, so this module needs no hook
into the scheduler to know what should run: it compares what the newest job body asks for
(`launches.plan`) with the pods it sees in its watch, creates and deletes pods to match, and
hands what the pods say (`outcomes.outcome`) to the core: failed pods and pods that cannot be
made are triggers of the driver (`Admissions.pods_failed`, `launch_failed`; the job's failure
policy is the core's), whose decision goes to the admission loop's outbox like any other;
Running and Succeeded are the runtime's words (`statuses.PodsSaid`), written at once. After a restart the watches replay every job
and pod, so the same comparison adopts what exists.

Why a pod waits for chips: the scheduler reuses a victim's chips in the cycle that preempts it,
but a Neuron device is free only when the pod holding it is gone. So no pod is created while a
live pod of another job (or of an older attempt of the same job) holds one of its chips; the
deletion events of those pods wake the job again. Pods are deleted with the template's
`terminationGracePeriodSeconds` (default `--pod-grace-seconds`), the time a checkpoint gets;
the pods of a job that is moved or evicted and goes on get its
`spec.checkpoint.gracePeriodSeconds` when it sets one (`movewrites.stop_grace`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ultraplane.operator.jobviews import HOLDING_PHASES, TERMINAL_PHASES, kind_of, view_job
from ultraplane.operator.kube import Conflict, Gone, Rejected
from ultraplane.operator.movewrites import stop_grace
from ultraplane.operator.nodes import (
    DEFAULT_LABELS,
    NodeLabels,
    build,
    node_profile,
    ultraserver_name,
)
from ultraplane.operator.podwatch import PodWatch
from ultraplane.operator.statuses import PodsSaid, ReplicasReady

from ultraplane.hardware.profiles import UnknownProfileError, load_profile
from ultraplane.ids import (
    ChipId,
    JobKey,
    ServerId,
    job_key,
    parse_chip_id,
    parse_chip_ranges,
    server_id,
)
from ultraplane.pods import launches
from ultraplane.pods.outcomes import PodState, outcome
from ultraplane.scheduling.decisions import Pending

if TYPE_CHECKING:
    from ultraplane.operator.controllers import Controller

log = logging.getLogger("ultraplane.operator.pods")
RATE_WINDOW = 5.0  # seconds over which the pod create rate is measured (`PodPlane.held`)
# How long an admitted job's pods count as owed before it launches them: most launch within a
# second; one waiting for a preempted victim's grace period (120 s by default) stops holding
# the budget of the jobs after it after this long.
OWED_SECONDS = 10.0
REPLACE_REASONS = frozenset({"ChipReplaced", "PodReplaced"})


class PodKube(Protocol):
    """The API calls of the pod data plane."""

    def create_pod(self, namespace: str, body: Mapping[str, Any]) -> None: ...
    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None) -> None: ...
    def label_pod(self, namespace: str, name: str, labels: Mapping[str, str]) -> None: ...
    def create_service(self, namespace: str, body: Mapping[str, Any]) -> None: ...
    def list_nodes(self, label: str) -> list[dict[str, Any]]: ...
    def delete_service(self, namespace: str, name: str) -> None: ...
    def list_pods(self, namespace: str | None, label: str) -> tuple[list[dict[str, Any]], str]: ...
    def watch_pods(self, namespace: str | None, label: str, resource_version: str,
                   timeout_seconds: int) -> Iterator[list[bytes]]: ...


@dataclass
class PodInfo:
    """One pod of a job, as the watch last showed it."""

    name: str
    namespace: str
    uid: str  # the job's
    attempt: int
    group: int
    rank: int
    server: ServerId
    chips: tuple[ChipId, ...]
    phase: str = "Pending"
    message: str = ""
    terminating: bool = False
    vanished: bool = False
    seen: bool = True  # False: recorded from our own create, no watch event of it yet

    @property
    def live(self) -> bool:
        """Holds its devices: not finished and not gone (terminating pods still hold them)."""
        return not self.vanished and self.phase not in TERMINAL_PHASES  # a pod's phases spell the same


@dataclass
class JobPods:
    """The pods of one job key (any uid, any attempt) and what was handed on for them."""

    pods: dict[str, PodInfo] = field(default_factory=dict)
    acted: tuple[int, str] | None = None  # (attempt, outcome kind) already handed on
    service: str | None = None


def pod_info(body: Mapping[str, Any]) -> tuple[JobKey, PodInfo] | None:
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    notes = meta.get("annotations") or {}
    key = notes.get(launches.ANNOTATION_JOB_KEY)
    if not key:
        return None
    try:
        # ranges (`ids.chip_ranges`); a lone chip id is one, so older pods' lists parse too
        chips = tuple(parse_chip_ranges(str(notes.get(launches.ANNOTATION_CHIPS, ""))))
        info = PodInfo(
            name=str(meta.get("name", "")), namespace=str(meta.get("namespace", "")),
            uid=str(labels.get(launches.LABEL_JOB_UID, "")),
            attempt=int(labels.get(launches.LABEL_ATTEMPT, 0)),
            group=int(labels.get(launches.LABEL_GROUP, 0)),
            rank=int(labels.get(launches.LABEL_RANK, 0)),
            server=ServerId(str(notes.get(launches.ANNOTATION_SERVER, ""))), chips=chips)
    except ValueError:
        return None
    status = body.get("status") or {}
    info.phase = str(status.get("phase") or "Pending")
    info.message = str(status.get("message") or status.get("reason") or "")
    info.terminating = bool(meta.get("deletionTimestamp"))
    return JobKey(str(key)), info


class PodPlane:
    """Pods and Nodes as the watches show them, and the loop that makes pods match jobs."""

    def __init__(self, kube: PodKube, controller: Controller, *,
                 labels: NodeLabels = DEFAULT_LABELS, grace_seconds: int = 120,
                 cluster_domain: str = "svc", port: int = launches.COORDINATOR_PORT,
                 batch: float = 0.05, retry: float = 2.0, creates: int = 32, slots: int = 48,
                 backlog_seconds: float = 2.0, backlog_floor: int = 64,
                 namespaces: list[str] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.watch = PodWatch(kube, launches.LABEL_JOB_UID, namespaces,
                              on_list=self.relisted, on_events=self.observe_pods)
        self.watching = False
        self.controller = controller
        self.labels = labels
        self.grace_seconds = grace_seconds
        self.cluster_domain = cluster_domain
        self.port = port
        self.batch = batch
        self.retry = retry
        # The pod plane's calls have API slots of their own (`slots`), not the writers' queue:
        # a cycle's hundreds of admission writes are queued there at once, and a job's pods
        # must not wait for every admission of its cycle to land (nor a wave of creates hold
        # back the Running and Succeeded writes). Creates take at most `creates` of the slots,
        # so deletes (which free chips) always find one.
        self.creating = asyncio.Semaphore(creates)
        self.slots = asyncio.Semaphore(slots)
        self._pool = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="pods")
        self.node_changes = 0  # a planned launch is reused until a Node changes
        self.jobs: dict[JobKey, JobPods] = {}
        self.node_bodies: dict[str, dict[str, dict[str, Any]]] = {}  # UltraServer -> Nodes
        self.indexed: dict[str, dict[ServerId, str]] = {}  # UltraServer -> server -> Node
        self.holders: dict[ChipId, tuple[JobKey, str]] = {}  # chip -> live pod holding it
        self.deleting: set[tuple[str, str]] = set()
        self.dirty: set[JobKey] = set()
        controller.on_written = self.written
        self.waiting: set[JobKey] = set()  # jobs whose pods wait for chips still held
        self.busy: set[JobKey] = set()  # reconciles in flight
        self.tasks: set[asyncio.Task[None]] = set()
        self.again: set[JobKey] = set()  # marked while in flight
        self.launches: dict[JobKey, tuple[Any, launches.Launch]] = {}
        self.wake = asyncio.Event()
        # The launch backlog (see `held`): pod creates asked for and not yet answered, and
        # when each of the last `RATE_WINDOW` seconds' creates was answered.
        self.backlog_seconds = backlog_seconds
        self.backlog_floor = backlog_floor
        self.clock = clock
        self.queued_creates = 0
        # Pods of jobs admitted whose creates are not queued yet (their status write, then
        # their reconcile, come first; or another job's pods still hold their chips): job ->
        # (pods, when). Counted against the budget until `_create` queues them; an entry older
        # than OWED_SECONDS is let go.
        self.owed: dict[JobKey, tuple[int, float]] = {}
        self.answered: deque[float] = deque()
        controller.launches = self

    # -- the launch backlog ------------------------------------------------------------
    def create_rate(self) -> float:
        """Pod creates answered per second over the last `RATE_WINDOW` seconds. A burst after
        an idle spell reads low for its first seconds (its answers over the whole window), on
        purpose: the API server answers the first creates of a burst faster than it will once
        the burst's status writes and kubelet reports load it, and a budget sized by those
        first answers queued more than the horizon (measured: see docs/operator.md)."""
        now = self.clock()
        while self.answered and self.answered[0] < now - RATE_WINDOW:
            self.answered.popleft()
        return len(self.answered) / RATE_WINDOW

    def owe(self, key: JobKey, pods: int) -> None:
        """The admission loop admitted `key`, whose admission will launch `pods` pods."""
        self.owed[key] = (pods, self.clock())

    def backlog(self) -> int:
        """Pod creates queued, and those owed to jobs just admitted."""
        now = self.clock()
        for key in [k for k, (_, t) in self.owed.items() if now - t > OWED_SECONDS]:
            del self.owed[key]
        return self.queued_creates + sum(n for n, _ in self.owed.values())

    def budget(self) -> int | None:
        """Pods an admission cycle may still launch: what the API server answers in
        `backlog_seconds` at its recent rate (at least `backlog_floor`), less the creates
        already queued and the pods owed (`backlog`). None when the backlog is not limited. It bounds the first wave after
        a burst, which `held` (between cycles) cannot: that cycle sees no backlog yet."""
        if self.backlog_seconds <= 0:
            return None
        allowed = max(float(self.backlog_floor), self.create_rate() * self.backlog_seconds)
        return int(allowed) - self.backlog()

    def held(self) -> str | None:
        """Why admissions wait, or None: the pod creates already asked for would take
        `backlog_seconds` or more at the rate the API server answers them (and are at least
        `backlog_floor`), so no launch budget is left (`budget`). Admitting more would only
        queue their pods behind these: their chips would be committed and idle while they
        wait, and a job admitted meanwhile could not be placed better. So the admission loop
        holds its cycles (`AdmissionLoop.run`) until the backlog drains, like Kueue's
        `waitForPodsReady.blockAdmission` but bounded by time, not one job at a time."""
        left = self.budget()
        if left is None or left > 0:
            return None
        waiting = sum(n for k, (n, _) in self.owed.items() if k in self.waiting)
        return (f"{self.backlog()} pod creates queued or owed ({self.queued_creates} queued, "
                f"{waiting} owed to jobs waiting for chips other pods still hold), "
                f"{self.create_rate():.0f}/s answered: {self.backlog_seconds:g} s of launches "
                "or more")

    async def sync(self) -> None:
        """List the labelled Nodes before the first admission: kopf's own Node watch replays
        them one handler call at a time, and a job admitted meanwhile must find its Nodes."""
        for body in await self._call(self.kube.list_nodes, self.labels.ultraserver):
            self.observe_node(body)
        if not self.watching:  # the pods it created, as they are now, then as they change
            await self.watch.sync()
            self.watch.start()
            self.watching = True
        log.info("pod data plane: %d Nodes of %d UltraServers", sum(
            len(b) for b in self.node_bodies.values()), len(self.node_bodies))

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        async with self.slots:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    # -- intake (kopf handlers) --------------------------------------------------------
    def observe_job(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        """The job's newest body is the admission loop's (`Controller.bodies`): only wake."""
        meta = body.get("metadata") or {}
        key = job_key(kind_of(body), str(meta.get("namespace", "")), str(meta.get("name", "")))
        self.jobs.setdefault(key, JobPods())
        self._mark(key)

    def written(self, key: JobKey) -> None:
        """The admission loop wrote the job's status: compare at once, not at its echo."""
        self.jobs.setdefault(key, JobPods())
        self._mark(key)

    def observe_pods(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        """A batch of pod watch events (`podwatch.PodWatch`), in order."""
        for kind, body in events:
            self.observe_pod(body, deleted=kind == "DELETED")

    def relisted(self, namespace: str | None, bodies: list[dict[str, Any]]) -> None:
        """A full listing of the pods in `namespace` (None: all): the known ones it lacks were
        deleted while no watch ran."""
        listed = set()
        for body in bodies:
            meta = body.get("metadata") or {}
            listed.add((str(meta.get("namespace", "")), str(meta.get("name", ""))))
            self.observe_pod(body)
        for key, state in list(self.jobs.items()):
            for info in list(state.pods.values()):
                if (namespace is None or info.namespace == namespace) and info.seen \
                        and not info.vanished and (info.namespace, info.name) not in listed:
                    self._observe(key, info, deleted=True)

    def observe_pod(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        found = pod_info(body)
        if found is None:
            return
        self._observe(*found, deleted=deleted)

    def _observe(self, key: JobKey, info: PodInfo, *, deleted: bool) -> None:
        state = self.jobs.setdefault(key, JobPods())
        # the Service came with the pods (perhaps before a restart): removed with the job
        state.service = state.service or launches.dns_label(key.split("/", 2)[2])
        ident = (info.namespace, info.name)
        if deleted:
            info.vanished = True  # its devices are free either way
            if ident in self.deleting:
                self.deleting.discard(ident)
                state.pods.pop(info.name, None)
            else:  # force-deleted, or its Node went: a failure of that server
                state.pods[info.name] = info
        else:
            state.pods[info.name] = info
        self._hold(key, info)
        self._mark(key)

    def observe_node(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        name = str((body.get("metadata") or {}).get("name", ""))
        before: Any = None
        for held, bodies in self.node_bodies.items():
            if (old := bodies.pop(name, None)) is not None:
                before = (old.get("metadata") or {}).get("labels")
                self.indexed.pop(held, None)
        us = ultraserver_name(body, self.labels)
        after: Any = None
        if us is not None and not deleted:
            self.node_bodies.setdefault(us, {})[name] = dict(body)
            self.indexed.pop(us, None)
            after = (body.get("metadata") or {}).get("labels")
        if before != after:  # server -> Node comes from the labels alone (`nodes.build`)
            self.node_changes += 1

    def nodes_of(self, us: str) -> dict[ServerId, str]:
        """Server -> Node of one UltraServer, by the rules of `--ultraservers-from-nodes`
        (`nodes.build`); a Node with neither profile nor instance-type label takes the
        UltraServer's profile (the UltraServer object says what it is)."""
        found = self.indexed.get(us)
        if found is None:
            entry = self.controller.inventory.get(us)
            profile = entry.ultraserver.profile if entry else "trn3-gen2"
            bodies = [self._with_profile(b, profile) for b in self.node_bodies.get(us, {}).values()]
            built, _ = build(us, bodies, self.labels)
            found = {server_id(us, i): n for i, n in built.nodes.items()} if built else {}
            self.indexed[us] = found
        return found

    def _with_profile(self, body: dict[str, Any], profile: str) -> dict[str, Any]:
        if node_profile(body, self.labels) is not None:
            return body
        meta = body.get("metadata") or {}
        labels = {**(meta.get("labels") or {}), self.labels.profile: profile}
        return {**body, "metadata": {**meta, "labels": labels}}

    def _hold(self, key: JobKey, info: PodInfo) -> None:
        for chip in info.chips:
            holder = self.holders.get(chip)
            if info.live:
                self.holders[chip] = (key, info.name)
            elif holder == (key, info.name):
                del self.holders[chip]
                self.dirty.update(self.waiting)  # one of them may wait for this chip
                self.waiting.clear()

    def _mark(self, key: JobKey) -> None:
        self.dirty.add(key)
        self.wake.set()

    # -- the loop ----------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            await asyncio.sleep(self.batch)
            if not (self.controller.ready and self.controller.leader):
                continue
            keys, self.dirty = self.dirty, set()
            for key in sorted(keys):
                if key in self.busy:  # one reconcile per job at a time; this one runs after
                    self.again.add(key)
                else:
                    self.busy.add(key)
                    task = asyncio.create_task(self._reconcile_one(key))
                    self.tasks.add(task)
                    task.add_done_callback(self.tasks.discard)

    async def _reconcile_one(self, key: JobKey) -> None:
        """One job's reconcile as its own task: a job waiting on slow pod creates never holds
        back another job's launch."""
        try:
            await self.reconcile(key)
        except Exception as exc:
            log.warning("pods of %s: %s; retrying", key, exc)
            asyncio.get_running_loop().call_later(self.retry, self._mark, key)
        finally:
            self.busy.discard(key)
            if key in self.again:
                self.again.discard(key)
                self._mark(key)

    async def reconcile(self, key: JobKey) -> None:
        state = self.jobs.get(key)
        if state is None:
            return
        # None once the job is gone or being deleted (the admission loop forgets it then)
        body = self.controller.bodies.get(key)
        spec = (body or {}).get("spec") or {}
        status = (body or {}).get("status") or {}
        meta = (body or {}).get("metadata") or {}
        phase = str(status.get("phase") or "")
        log.debug("pods of %s: job %s, %d pod(s) seen", key, phase or "gone", len(state.pods))
        if not self.controller.admissions.is_running(key):  # (its admission may still be
            self.owed.pop(key, None)  # on its way: then it is running, and its pods owed)
        if body is None or meta.get("deletionTimestamp") or not spec.get("template"):
            await self._delete(key, list(state.pods.values()), keep_done=False)
            if body is None:
                await self._drop_service(key, state)
                if not state.pods:
                    self.jobs.pop(key, None)
                    self.launches.pop(key, None)
            return
        if phase in TERMINAL_PHASES:
            await self._delete(key, [p for p in state.pods.values() if p.live], keep_done=True)
            return
        if phase not in HOLDING_PHASES or not (status.get("allocation") or {}).get("chips"):
            await self._delete(key, list(state.pods.values()), keep_done=False,
                               grace=stop_grace(spec))  # evicted: it saves, if it says how
            return
        await self._run_attempt(key, state, body)

    async def _run_attempt(self, key: JobKey, state: JobPods, body: dict[str, Any]) -> None:
        status = body.get("status") or {}
        attempt = int(status.get("attempt") or 0)
        uid = str(body["metadata"].get("uid", ""))
        if state.acted is not None and state.acted[0] == attempt \
                and state.acted[1] in ("failed", "succeeded"):
            return  # handed on; the job's next status says what comes next
        try:
            launch = self.plan(key, body)
        except launches.NoNodeError as exc:
            self._fail(key, state, attempt, "NoNodeForServer",
                       f"{exc}: label its Node {self.labels.ultraserver}=<UltraServer> and "
                       f"{self.labels.server_index}=<index>.")
            return
        wanted = launch.by_slot()
        current: dict[tuple[int, int], PodInfo] = {}
        stale: list[PodInfo] = []
        relabel: list[PodInfo] = []
        for pod in state.pods.values():
            slot = (pod.group, pod.rank)
            plan = wanted.get(slot)
            if pod.uid != uid:
                stale.append(pod)  # a deleted job's, recreated under the same name
            elif pod.attempt == attempt and plan is not None \
                    and (pod.server, pod.chips) == (plan.server, tuple(plan.chips)):
                current[slot] = pod  # (a replica removed and added again may sit elsewhere)
            elif (pod.attempt < attempt and plan is not None and pod.live and not pod.terminating
                  and str(status.get("reason")) in REPLACE_REASONS and slot not in current
                  and (pod.server, pod.chips) == (plan.server, plan.chips)):
                relabel.append(pod)  # ReplaceAffected keeps the pods of unaffected servers
            else:
                stale.append(pod)
        for pod in relabel:
            if (pod.group, pod.rank) in current:
                stale.append(pod)
                continue
            await self._call(self.kube.label_pod, pod.namespace, pod.name,
                                        {launches.LABEL_ATTEMPT: str(attempt)})
            pod.attempt = attempt
            current[(pod.group, pod.rank)] = pod
        # an older attempt's pods (a move, a restart) get the job's checkpoint grace
        await self._delete(key, stale, keep_done=False, grace=stop_grace(body.get("spec") or {}))

        slots = {slot: (plan.server, PodState(phase=p.phase if (p := current.get(slot)) else "",
                                              exists=p is not None,
                                              vanished=bool(p and p.vanished),
                                              message=p.message if p else ""))
                 for slot, plan in wanted.items()}
        verdict = outcome(launch.job.kind, slots)
        if state.acted == (attempt, verdict.kind):
            pass
        elif verdict.kind == "failed":
            state.acted = (attempt, "failed")
            self._pods_failed(key, body, launch, verdict.message, verdict.servers)
            return
        elif verdict.kind == "succeeded":
            state.acted = (attempt, "succeeded")
            await self._hand_on(key, state, "Succeeded", "PodsSucceeded",
                                f"Pods: {verdict.message}.", release=True)
            return
        elif verdict.kind == "running":
            state.acted = (attempt, "running")
            if status.get("phase") != "Running":
                await self._hand_on(key, state, "Running", "PodsRunning",
                                    f"{verdict.message} on the allocated Nodes.")
        if launch.job.kind == "InferenceJob":
            await self._say_ready(key, status, wanted, current)
        missing = [plan for slot, plan in wanted.items() if slot not in current]
        if not missing:
            return
        if self._blocked(key, state, missing, attempt):
            self.waiting.add(key)  # woken when a pod holding one of its chips goes
            return
        await self._create(key, state, launch, missing, attempt)

    async def _say_ready(self, key: JobKey, status: Mapping[str, Any],
                         wanted: Mapping[tuple[int, int], launches.PodPlan],
                         current: Mapping[tuple[int, int], PodInfo]) -> None:
        """Write status.readyReplicas when it moved: replicas whose every pod runs (what the
        scale subresource's readers and `kubectl get ij` show beside the replicas wanted)."""
        groups: dict[int, bool] = {}
        for slot in wanted:
            pod = current.get(slot)
            groups[slot[0]] = groups.get(slot[0], True) and pod is not None \
                and pod.phase == "Running" and not pod.terminating
        ready = sum(groups.values())
        if (status.get("readyReplicas") or 0) != ready:  # (unset reads 0: no write for it)
            await self.controller.write(key, ReplicasReady(ready))

    def _blocked(self, key: JobKey, state: JobPods, missing: list[launches.PodPlan],
                 attempt: int) -> bool:
        """Chips still held by another job's pod, or older pods of this job still live."""
        if any(p.live and p.attempt != attempt for p in state.pods.values()):
            return True
        for plan in missing:
            for chip in plan.chips:
                holder = self.holders.get(chip)
                if holder is not None and holder != (key, plan.name):
                    return True
        return False

    async def _create(self, key: JobKey, state: JobPods, launch: launches.Launch,
                      missing: list[launches.PodPlan], attempt: int) -> None:
        job = launch.job
        if state.service is None:
            try:
                await self._call(self.kube.create_service, job.namespace,
                                            launch.service)
            except Conflict:
                pass
            except Rejected as exc:
                self._fail(key, state, attempt, "ServiceRejected", f"Service: {exc}")
                return
            state.service = launches.service_name(job)

        async def one(plan: launches.PodPlan) -> str | None:
            try:
                async with self.creating:
                    await self._call(self.kube.create_pod, job.namespace, plan.body)
            except Conflict:
                return None  # ours from before a restart; its watch event follows
            except Rejected as exc:
                return str(exc)
            finally:
                self.queued_creates -= 1
                self.answered.append(self.clock())
                self.create_rate()  # drops the answers older than the window
            found = pod_info(plan.body)
            if found is not None and plan.name not in state.pods:
                found[1].seen = False  # a listing that predates it must not count it gone
                state.pods[plan.name] = found[1]
                self._hold(key, found[1])
            return None

        self.queued_creates += len(missing)  # owed until now; queued from here on
        self.owed.pop(key, None)
        refused = [m for m in await asyncio.gather(*(one(p) for p in missing)) if m]
        if refused:
            self._fail(key, state, attempt, "PodRejected",
                       f"The API server refused the pod template: {refused[0]}")

    async def _delete(self, key: JobKey, pods: list[PodInfo], *, keep_done: bool,
                      grace: int | None = None) -> None:
        """`grace`: seconds a live pod gets (None: its own terminationGracePeriodSeconds)."""
        async def one(pod: PodInfo) -> None:
            ident = (pod.namespace, pod.name)
            if pod.vanished:
                self.jobs[key].pods.pop(pod.name, None)
                return
            if ident in self.deleting or (keep_done and not pod.live):
                return
            self.deleting.add(ident)
            try:
                seconds = 0 if not pod.live else grace  # None: the pod's own grace period
                await self._call(self.kube.delete_pod, pod.namespace, pod.name, seconds)
            except Gone:
                self.deleting.discard(ident)
                self.jobs[key].pods.pop(pod.name, None)
                pod.vanished = True
                self._hold(key, pod)
            except Exception:
                self.deleting.discard(ident)
                raise

        await asyncio.gather(*(one(p) for p in pods))

    async def _drop_service(self, key: JobKey, state: JobPods) -> None:
        if state.service is None:
            return
        namespace = key.split("/")[1]
        with contextlib.suppress(Gone):
            await self._call(self.kube.delete_service, namespace, state.service)
        state.service = None

    # -- the job's side ----------------------------------------------------------------
    def plan(self, key: JobKey, body: Mapping[str, Any]) -> launches.Launch:
        """The job's pods, planned again only when what they are made of changed: the spec
        (its generation), the attempt, the allocation or a Node (every pod event of a job
        asks, and a 144-chip job's plan walks every chip)."""
        meta = body.get("metadata") or {}
        status = body.get("status") or {}
        alloc = status.get("allocation") or {}
        ident = (meta.get("uid"), meta.get("generation"), status.get("attempt"),
                 self.node_changes, tuple(alloc.get("chips") or ()),
                 tuple(tuple(r.get("chips") or ()) for r in alloc.get("replicas") or ()))
        cached = self.launches.get(key)
        if cached is not None and cached[0] == ident:
            return cached[1]
        view = view_job(body)
        groups = [list(c) for c in view.replica_chips] if view.kind == "InferenceJob" \
            else [list(view.chips)]
        job = launches.JobRef(key=key, kind=view.kind, namespace=view.namespace, name=view.name,
                              uid=str(meta.get("uid", "")), attempt=int(status.get("attempt") or 0))
        cores: dict[str, int] = {}
        nodes: dict[ServerId, str] = {}
        for chips in groups:
            for chip in chips:
                us = parse_chip_id(chip)[0]
                if us not in cores:
                    cores[us] = self._cores(us)
                    nodes.update(self.nodes_of(us))
        launch = launches.plan(job, body["spec"]["template"], groups, nodes,
                               cores_per_chip=cores, grace_seconds=self.grace_seconds,
                               port=self.port, cluster_domain=self.cluster_domain)
        self.launches[key] = (ident, launch)
        return launch

    def _cores(self, us: str) -> int:
        entry = self.controller.inventory.get(us)
        try:
            return load_profile(entry.ultraserver.profile if entry else "trn3-gen2") \
                .chip.neuron_cores
        except (UnknownProfileError, AttributeError):
            return 8

    async def _hand_on(self, key: JobKey, state: JobPods, phase: Literal["Running", "Succeeded"],
                       reason: str, message: str, *, release: bool = False) -> None:
        """Write Running or Succeeded now, not in the next admission cycle: the status write
        refuses a job evicted meanwhile, so it never races an eviction's write. `release`:
        the job is done, and the core is told (`Admissions.finished`) before the write."""
        if not isinstance(self.controller.outbox.get(key), Pending | None):
            return  # an eviction decided meanwhile wins; it deletes the pods
        write = self.controller.write(key, PodsSaid(phase, reason, message))
        if release:
            self.controller.admissions.finished(key, phase, message)
            # The pods still running stop now, beside the status write rather than after its
            # echo: the next job on these chips waits for exactly these pods to go. Safe
            # before the write lands: the verdict comes from the pods that succeeded (kept),
            # so a restart or a retried write decides the same.
            live = [p for p in state.pods.values() if p.live]
            done, stopped = await asyncio.gather(
                write, self._delete(key, live, keep_done=True), return_exceptions=True)
            if isinstance(stopped, Exception):  # the reconcile after the write deletes them
                log.debug("%s: stopping its pods: %s", key, stopped)
            if isinstance(done, BaseException):
                raise done
            self.controller.wake.set()  # the chips are free for the next cycle
        else:
            done = await write
        if not done and key in self.controller.bodies:
            state.acted = None  # retried on the job's next event, or after a pause
            asyncio.get_running_loop().call_later(self.retry, self._mark, key)

    def _fail(self, key: JobKey, state: JobPods, attempt: int, reason: str, message: str) -> None:
        if state.acted == (attempt, "failed"):
            return
        state.acted = (attempt, "failed")
        self.owed.pop(key, None)
        log.warning("%s fails: %s", key, message)
        self.controller.persist(key, self.controller.admissions.launch_failed(key, reason, message))
        self.controller.wake.set()

    def _pods_failed(self, key: JobKey, body: Mapping[str, Any], launch: launches.Launch,
                     message: str, servers: tuple[ServerId, ...]) -> None:
        """Pods of the job failed on `servers`: the core applies its failure policy
        (`Admissions.pods_failed`, as for a failed chip), told which chips those servers' pods
        held (what `ReplaceAffected` moves off; the other pods keep running)."""
        controller = self.controller
        lost: dict[JobKey, list[ChipId]] = {}
        for plan in launch.pods:
            if plan.server in servers:
                part = key if launch.job.kind == "TrainingJob" else JobKey(f"{key}#{plan.group}")
                lost.setdefault(part, []).extend(plan.chips)
        policy = view_job(body).failure_policy
        controller.persist(key, controller.admissions.pods_failed(key, lost, policy, message))
        controller.wake.set()
