"""kopf handlers: thin adapters from watch events to the `Controller`.

Why so little here: each handler converts the event and hands it to the controller's cache; the
admission loop (started on startup) does the scheduling. Handlers are `async` so they run on
kopf's event loop, next to the loop they wake, with no locking. `kopf run -m
ultraplane.operator.handlers` works too; `ultraplane operator` sets `CONFIG` first. The Node
watch exists only with `--ultraservers-from-nodes` (`ULTRAPLANE_ULTRASERVERS_FROM_NODES=1`):
registered then and never otherwise, so an operator without it needs no access to Nodes.
The pod data plane (`pods.py`, on unless `--no-launch-pods`) adds a watch of Nodes (the
server -> Node map) and runs its own watch of the pods it created (label
`ultraplane.dev/job-uid`, `podwatch.py`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf
from ultraplane.operator.autoscalers import AutoscalerLoop, LoadReader
from ultraplane.operator.controllers import Controller
from ultraplane.operator.discovery import NodeDiscovery
from ultraplane.operator.eventposters import EventPoster
from ultraplane.operator.gctuning import DEFAULT_FULL_SECONDS
from ultraplane.operator.jobviews import (
    GROUP,
    INFERENCE,
    POWERBUDGETS,
    TENANTCOHORTS,
    TENANTQUEUES,
    TRAINING,
    ULTRASERVERS,
    VERSION,
)
from ultraplane.operator.kube import KubeClient, connection_info
from ultraplane.operator.leases import LeaseElector
from ultraplane.operator.loadreaders import (
    DEFAULT_SELECTOR,
    DirectScrapes,
    PrometheusReader,
    PrometheusReads,
)
from ultraplane.operator.nodes import NodeLabels
from ultraplane.operator.pods import PodPlane

from ultraplane.kubeclients import ClusterAccess
from ultraplane.scheduling.queueorder import DEFAULT_STRETCH

log = logging.getLogger("ultraplane.operator")


def _env_namespaces() -> list[str]:
    return [n for n in os.environ.get("ULTRAPLANE_NAMESPACES", "").split(",") if n]


@dataclass
class Config:
    """Run options (set by `ultraplane operator`; from the environment under `kopf run`)."""

    namespaces: list[str] = field(default_factory=_env_namespaces)
    lease: str | None = os.environ.get("ULTRAPLANE_LEASE") or None
    fleet: str | None = os.environ.get("ULTRAPLANE_FLEET") or None
    lease_namespace: str = os.environ.get("POD_NAMESPACE", "default")
    concurrency: int = int(os.environ.get("ULTRAPLANE_WRITE_CONCURRENCY", "64"))
    events: bool = os.environ.get("ULTRAPLANE_EVENTS", "1") != "0"
    event_qps: float = float(os.environ.get("ULTRAPLANE_EVENT_QPS", "5"))
    event_burst: int = int(os.environ.get("ULTRAPLANE_EVENT_BURST", "50"))
    event_digest_seconds: float = float(os.environ.get("ULTRAPLANE_EVENT_DIGEST_SECONDS", "10"))
    stats_seconds: float = float(os.environ.get("ULTRAPLANE_CYCLE_STATS_SECONDS", "30"))
    # 0: leave the cyclic collector on CPython's schedule (see operator/gctuning.py)
    gc_full_seconds: float = float(os.environ.get("ULTRAPLANE_GC_FULL_SECONDS",
                                                  str(DEFAULT_FULL_SECONDS)))
    reservation: bool = os.environ.get("ULTRAPLANE_RESERVATION", "1") != "0"
    # moves of running jobs for a tenant queue's within-quota gang (`ultraplane.scheduling.moves`)
    moves: bool = os.environ.get("ULTRAPLANE_MOVES", "1") != "0"
    queue_stretch: float = float(os.environ.get("ULTRAPLANE_QUEUE_STRETCH", str(DEFAULT_STRETCH)))
    ultraservers_from_nodes: bool = os.environ.get("ULTRAPLANE_ULTRASERVERS_FROM_NODES") == "1"
    ultraserver_label: str = (os.environ.get("ULTRAPLANE_ULTRASERVER_LABEL")
                              or NodeLabels.ultraserver)
    server_index_label: str = (os.environ.get("ULTRAPLANE_SERVER_INDEX_LABEL")
                               or NodeLabels.server_index)
    launch_pods: bool = os.environ.get("ULTRAPLANE_LAUNCH_PODS", "1") != "0"
    pod_grace_seconds: int = int(os.environ.get("ULTRAPLANE_POD_GRACE_SECONDS", "120"))
    launch_backlog_seconds: float = float(os.environ.get("ULTRAPLANE_LAUNCH_BACKLOG_SECONDS",
                                                         "2"))
    cluster_domain: str = os.environ.get("ULTRAPLANE_CLUSTER_DOMAIN", "svc")
    # the planner loop of autoscaled InferenceJobs (`autoscalers`): seconds between reads
    autoscale_seconds: float = float(os.environ.get("ULTRAPLANE_AUTOSCALE_SECONDS", "30"))
    prometheus_url: str | None = os.environ.get("ULTRAPLANE_PROMETHEUS_URL") or None
    prometheus_selector: str = os.environ.get("ULTRAPLANE_PROMETHEUS_SELECTOR",
                                              DEFAULT_SELECTOR)
    # --kubeconfig / --context (ultraplane/kubeclients.py); None: in-cluster, else the defaults
    access: ClusterAccess = field(default_factory=ClusterAccess)


CONFIG = Config()


def utcnow() -> datetime:
    return datetime.now(UTC)


_POSTER: list[EventPoster] = []  # built at the first Event, once `CONFIG` is set


def poster() -> EventPoster:
    """The operator's Event poster (`eventposters.EventPoster`), as `CONFIG` sets it up."""
    if not _POSTER:
        _POSTER.append(EventPoster(enabled=CONFIG.events, qps=CONFIG.event_qps,
                                   burst=CONFIG.event_burst,
                                   digest_seconds=CONFIG.event_digest_seconds))
    return _POSTER[0]


def post_event(body: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
    """A Kubernetes Event on the object, within the Event rate limit (`EventPoster.post`)."""
    poster().post(body, type_, reason, message)


def _capture_posting() -> None:
    poster().capture()


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf keeps each object's "essence" (a deep copy of the body, twice per event) to diff it
    for change handlers; the operator has only event handlers, which no diff reaches, and at
    the pod data plane's event rate those copies were the largest share of its CPU."""

    def build(self, *, body: kopf.Body,
              extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        pass


def new_controller(kube: KubeClient) -> Controller:
    """The admission controller as CONFIG sets it up (at start-up, and afresh on each lease
    gain)."""
    return Controller(kube, clock=utcnow, emit=post_event,
                      namespaces=CONFIG.namespaces or None, fleet=CONFIG.fleet,
                      concurrency=CONFIG.concurrency, reservation=CONFIG.reservation,
                      moves=CONFIG.moves,
                      queue_stretch=CONFIG.queue_stretch, stats_seconds=CONFIG.stats_seconds,
                      gc_full_seconds=CONFIG.gc_full_seconds or None)


def autoscaler(kube: KubeClient, controller: Controller) -> AutoscalerLoop:
    """The planner loop as CONFIG sets it up: direct scrapes, or Prometheus when given."""
    reader: LoadReader = (PrometheusReads(PrometheusReader(CONFIG.prometheus_url,
                                                           CONFIG.prometheus_selector))
                          if CONFIG.prometheus_url else DirectScrapes(kube))
    return AutoscalerLoop(kube, reader, bodies=lambda: controller.bodies,
                          planned=lambda: controller.cache.planned, clock=time.time,
                          interval=CONFIG.autoscale_seconds, active=lambda: controller.leader)


@kopf.on.login()
def login(**_: Any) -> Any:
    """kopf connects as the operator's own client does (`--kubeconfig`, `--context`)."""
    return connection_info(CONFIG.access)


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.posting.level = logging.WARNING  # our own Events are posted explicitly
    settings.watching.server_timeout = 300
    settings.persistence.finalizer = "ultraplane.dev/kopf"
    settings.persistence.diffbase_storage = NoDiffBase()
    # one pooled connection per worker: the writers', the pod plane's (PodPlane `slots`)
    kube = KubeClient(pool_size=CONFIG.concurrency + (48 if CONFIG.launch_pods else 0),
                      access=CONFIG.access)
    controller = new_controller(kube)
    memo["controller"] = controller
    tasks = [asyncio.create_task(controller.run(), name="ultraplane-admission"),
             asyncio.create_task(controller.queues.run(), name="ultraplane-queues"),
             asyncio.create_task(controller.budgets.run(), name="ultraplane-budgets")]
    if CONFIG.autoscale_seconds > 0:
        tasks.append(asyncio.create_task(autoscaler(kube, controller).run(),
                                         name="ultraplane-autoscaler"))
    discovery: NodeDiscovery | None = None
    labels = NodeLabels(ultraserver=CONFIG.ultraserver_label,
                        server_index=CONFIG.server_index_label)
    plane: PodPlane | None = None
    if CONFIG.launch_pods:
        plane = PodPlane(kube, controller, labels=labels, grace_seconds=CONFIG.pod_grace_seconds,
                         cluster_domain=CONFIG.cluster_domain,
                         backlog_seconds=CONFIG.launch_backlog_seconds,
                         namespaces=CONFIG.namespaces or None)
        memo["pods"] = plane
        tasks.append(asyncio.create_task(plane.run(), name="ultraplane-pods"))
    if CONFIG.ultraservers_from_nodes:
        discovery = NodeDiscovery(kube, labels=labels, fleet=CONFIG.fleet, emit=post_event)
        memo["discovery"] = discovery
        tasks.append(asyncio.create_task(discovery.run(), name="ultraplane-nodes"))
    if CONFIG.lease:
        controller.leader = False
        if discovery is not None:
            discovery.leader = False

        async def gain() -> None:
            await controller.take_over()  # fresh state, rebuilt from the API server below
            if discovery is not None:
                await discovery.sync()
                discovery.set_leader(True)
            if plane is not None:
                await plane.sync()
            await controller.sync()

        def loss() -> None:
            controller.step_down()
            if discovery is not None:
                discovery.set_leader(False)

        elector = LeaseElector(kube.coordination, name=CONFIG.lease,
                               namespace=CONFIG.lease_namespace,
                               identity=f"{socket.gethostname()}-{os.getpid()}",
                               on_gain=gain, on_loss=loss)
        tasks.append(asyncio.create_task(elector.run(), name="ultraplane-lease"))
    else:
        if discovery is not None:
            await discovery.sync()
        if plane is not None:
            await plane.sync()
        await controller.sync()
    memo["tasks"] = tasks


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    for task in memo.get("tasks", []):
        task.cancel()
    controller: Controller | None = memo.get("controller")
    if controller is not None:
        controller.loop.heap.release()
    plane: PodPlane | None = memo.get("pods")
    if plane is not None:
        plane.watch.close()


@kopf.on.event(GROUP, VERSION, ULTRASERVERS)
async def ultraserver_event(event: Mapping[str, Any], body: Mapping[str, Any],
                            memo: kopf.Memo, **_: Any) -> None:
    _capture_posting()
    controller: Controller = memo["controller"]
    controller.observe_ultraserver(body, deleted=event.get("type") == "DELETED")


@kopf.on.event(GROUP, VERSION, TENANTQUEUES)
async def tenantqueue_event(event: Mapping[str, Any], body: Mapping[str, Any],
                            memo: kopf.Memo, **_: Any) -> None:
    controller: Controller = memo["controller"]
    controller.observe_queue(body, deleted=event.get("type") == "DELETED")


@kopf.on.event(GROUP, VERSION, TENANTCOHORTS)
async def tenantcohort_event(event: Mapping[str, Any], body: Mapping[str, Any],
                             memo: kopf.Memo, **_: Any) -> None:
    controller: Controller = memo["controller"]
    controller.observe_cohort(body, deleted=event.get("type") == "DELETED")


@kopf.on.event(GROUP, VERSION, POWERBUDGETS)
async def powerbudget_event(event: Mapping[str, Any], body: Mapping[str, Any],
                            memo: kopf.Memo, **_: Any) -> None:
    controller: Controller = memo["controller"]
    controller.observe_budget(body, deleted=event.get("type") == "DELETED")


@kopf.on.event(GROUP, VERSION, TRAINING)
async def job_event(event: Mapping[str, Any], body: Mapping[str, Any],
                    memo: kopf.Memo, **_: Any) -> None:
    _capture_posting()
    controller: Controller = memo["controller"]
    controller.observe_job(body, deleted=event.get("type") == "DELETED", kind="TrainingJob")
    _pods_see_job(memo, body, "TrainingJob")


@kopf.on.event(GROUP, VERSION, INFERENCE)
async def inference_event(event: Mapping[str, Any], body: Mapping[str, Any],
                          memo: kopf.Memo, **_: Any) -> None:
    _capture_posting()
    controller: Controller = memo["controller"]
    controller.observe_job(body, deleted=event.get("type") == "DELETED", kind="InferenceJob")
    _pods_see_job(memo, body, "InferenceJob")


def _pods_see_job(memo: kopf.Memo, body: Mapping[str, Any], kind: str) -> None:
    plane: PodPlane | None = memo.get("pods")
    if plane is not None:
        plane.observe_job({**body, "kind": kind})


async def node_event(event: Mapping[str, Any], body: Mapping[str, Any],
                     memo: kopf.Memo, **_: Any) -> None:
    """A Node changed: its UltraServer is rebuilt by the discovery loop."""
    _capture_posting()
    discovery: NodeDiscovery | None = memo.get("discovery")
    if discovery is not None:
        discovery.observe_node(body, deleted=event.get("type") == "DELETED")
    plane: PodPlane | None = memo.get("pods")
    if plane is not None:
        plane.observe_node(body, deleted=event.get("type") == "DELETED")


_NODE_WATCH: list[Any] = []


def watch_nodes() -> None:
    """Registers the Node handler (once); called at import under `kopf run` with the env var,
    and by `ultraplane operator --ultraservers-from-nodes` after it sets `CONFIG`."""
    if not _NODE_WATCH:
        _NODE_WATCH.append(kopf.on.event("v1", "nodes")(node_event))


_POD_WATCH: list[Any] = []


def watch_pods() -> None:
    """Registers the Node handler of the pod data plane (once); its pods it watches itself
    (`podwatch.py`: a pod changes four or five times, and kopf's per-event work was most of
    what each change cost the operator)."""
    if not _POD_WATCH:
        _POD_WATCH.append(True)
        watch_nodes()


if CONFIG.ultraservers_from_nodes:
    watch_nodes()
if CONFIG.launch_pods:
    watch_pods()
