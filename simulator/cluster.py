"""Cluster mode: the virtual kubelet's loop against a real Kubernetes API server.

Why polling lists rather than kopf watches: the kubelet is level-triggered
(see `kubelets`), it must write status on a heartbeat anyway, and a list per
heartbeat keeps it correct after any missed event or restart, with no peering
or finalizers to coordinate with the operator. Patches go to the status
subresource as JSON merge patches carrying only simulator-owned fields.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from ultraplane.simulator.kubelets import Patch, VirtualKubelet
from ultraplane.simulator.metrics import SimulatorMetrics
from ultraplane.simulator.modelpods import ModelPods
from ultraplane.simulator.podservings import endpoints, replica_reader

from ultraplane import kubeclients
from ultraplane.documents.conversions import GROUP, PLURALS, VERSION
from ultraplane.kubeclients import ClusterAccess
from ultraplane.serving.requesttraces import RateSteps, RequestTrace

log = logging.getLogger("ultraplane.simulator")


def _client(access: ClusterAccess | None = None) -> Any:
    """The custom-objects API through the one client set-up (`ultraplane/kubeclients.py`);
    `ClusterUnavailable` when the API server does not answer."""
    from kubernetes import client

    return client.CustomObjectsApi(kubeclients.connect(access))


def _list(api: Any, plural: str, namespace: str | None) -> list[dict[str, Any]]:
    if namespace:
        items = api.list_namespaced_custom_object(GROUP, VERSION, namespace, plural)["items"]
    else:
        items = api.list_cluster_custom_object(GROUP, VERSION, plural)["items"]
    kind = {v: k for k, v in PLURALS.items()}.get(plural)
    for item in items:
        item.setdefault("kind", kind)
    return list(items)


def _send(api: Any, patch: Patch) -> None:
    from kubernetes.client.exceptions import ApiException

    try:
        if patch.kind == "UltraServer":
            api.patch_cluster_custom_object_status(GROUP, VERSION, "ultraservers", patch.name, patch.body)
        else:
            api.patch_namespaced_custom_object_status(GROUP, VERSION, patch.namespace,
                                                      PLURALS[patch.kind], patch.name, patch.body)
    except ApiException as exc:
        if exc.status in (404, 409, 422):  # gone, raced, or rejected: the next heartbeat heals it
            log.warning("status patch of %s %s/%s failed: %s %s", patch.kind, patch.namespace,
                        patch.name, exc.status, exc.reason)
            return
        raise


def heartbeat(api: Any, kubelet: VirtualKubelet, namespace: str | None,
              metrics: SimulatorMetrics | None = None) -> None:
    """One level-triggered pass: list, reconcile, write status.

    The metrics are updated before the writes, so a reader who sees a status never finds the
    metrics behind it."""
    kubelet.sync_ultraservers(_list(api, "ultraservers", None))
    jobs = _list(api, "trainingjobs", namespace) + _list(api, "inferencejobs", namespace)
    patches = kubelet.sync_jobs(jobs) + kubelet.tick()
    if metrics is not None:
        metrics.update(kubelet)
    for patch in patches:
        _send(api, patch)


def serve_models(core: Any, pods: ModelPods, namespace: str | None) -> None:
    """The replica pods' model servers: serve the running ones, then offer the load since
    the last pass (`podservings`, `modelpods`)."""
    pods.sync(endpoints(core, pods, namespace))
    pods.tick()


def run_cluster(*, time_scale: float, metrics_port: int, heartbeat_s: float,
                namespace: str | None = None, clock: Callable[[], float] = time.time,
                stop: threading.Event | None = None,
                access: ClusterAccess | None = None,
                requests: RequestTrace | None = None, steps: RateSteps | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
    api = _client(access)
    kubelet = VirtualKubelet(clock=clock, time_scale=time_scale)
    metrics = SimulatorMetrics()
    if metrics_port:
        from prometheus_client import start_http_server

        start_http_server(metrics_port, registry=metrics.registry)
    log.info("virtual kubelet up: time scale %.0fx, heartbeat %.1f s, metrics port %s",
             time_scale, heartbeat_s, metrics_port or "off")
    served: tuple[Any, ModelPods] | None = None
    if requests is not None:  # model servers on the replica pods, on the wall clock
        from kubernetes import client

        served = (client.CoreV1Api(api.api_client),
                  ModelPods(requests, clock=time.time, replica_of_job=replica_reader(api),
                            steps=steps))
    try:
        while not stop.is_set():
            try:
                heartbeat(api, kubelet, namespace, metrics)
                if served is not None:
                    serve_models(*served, namespace)
            except Exception:  # keep the data plane alive across API hiccups; logged
                log.exception("heartbeat failed; retrying")
            stop.wait(heartbeat_s)
    finally:
        if served is not None:
            served[1].close()
