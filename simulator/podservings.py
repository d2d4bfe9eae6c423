"""Cluster side of the simulated model servers: which pods to serve, read from the API server.

Why apart from `modelpods`: that module serves and advances metrics for endpoints it is
given; this one lists the InferenceJobs' running replica pods, gives a pod without an IP its
loopback address (the status a kubelet would write) and says which replica model each job
runs. Level-triggered like the virtual kubelet: every pass lists again.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Mapping
from typing import Any

from ultraplane.simulator.modelpods import ModelPods, PodEndpoint

from ultraplane.documents.conversions import GROUP, VERSION
from ultraplane.pods.launches import LABEL_JOB_KIND, LABEL_JOB_NAME, metrics_port
from ultraplane.serving.replicas import Replica, replica_for

log = logging.getLogger("ultraplane.simulator")


def _loopback(ip: str | None) -> bool:
    try:
        return ip is not None and ipaddress.IPv4Address(ip).is_loopback
    except ValueError:
        return False


def endpoints(core: Any, served: ModelPods, namespace: str | None = None) -> list[PodEndpoint]:
    """The running replica pods of InferenceJobs that have a `metrics` port, each with a
    loopback address (written as status.podIP when the pod has none)."""
    selector = f"{LABEL_JOB_KIND}=InferenceJob"
    pods = (core.list_namespaced_pod(namespace, label_selector=selector) if namespace
            else core.list_pod_for_all_namespaces(label_selector=selector)).items
    out = []
    for pod in pods:
        meta, status = pod.metadata, pod.status
        port = metrics_port({"spec": _spec(pod)})
        if (meta.deletion_timestamp is not None or status is None or status.phase != "Running"
                or port is None):
            continue
        ip = status.pod_ip
        if not ip:
            ip = served.address_for(meta.uid)
            core.patch_namespaced_pod_status(meta.name, meta.namespace,
                                             {"status": {"podIP": ip, "podIPs": [{"ip": ip}]}})
        elif not _loopback(ip):
            continue
        out.append(PodEndpoint((meta.namespace, (meta.labels or {})[LABEL_JOB_NAME]),
                               meta.name, meta.uid, ip, port))
    return out


def _spec(pod: Any) -> Mapping[str, Any]:
    """The pod spec's containers with their ports, in the API's camelCase."""
    return {"containers": [{"ports": [{"name": p.name, "containerPort": p.container_port}
                                      for p in (c.ports or [])]}
                           for c in pod.spec.containers]}


def replica_reader(custom: Any) -> Any:
    """`replica_of_job` for `ModelPods`: the replica model an InferenceJob's spec names."""

    def replica_of_job(job: tuple[str, str]) -> Replica | None:
        try:
            body = custom.get_namespaced_custom_object(GROUP, VERSION, job[0],
                                                       "inferencejobs", job[1])
        except Exception:  # gone or unreadable: not served this pass
            return None
        spec = body.get("spec") or {}
        model = spec.get("model") or {}
        try:
            return replica_for(str(model.get("name", "")), chips=int(spec["chipsPerReplica"]),
                               profile=spec.get("profile"),
                               parameters_b=model.get("parametersBillions"))
        except (KeyError, ValueError) as exc:
            log.warning("no model server for %s/%s: %s", job[0], job[1], exc)
            return None

    return replica_of_job
