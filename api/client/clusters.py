"""The client's cluster transport: the custom resources, straight through kubeconfig.

Why apart from `transports.py`: this is the only client module that imports the Kubernetes
client, and its set-up (`api_client`) is one function, to be switched to the project's shared
Kubernetes client module once there is one. Documents are turned into the REST API's shapes
(resource-shaped jobs, camelCase UltraServer views, accounting rows), so every command reads
one vocabulary whichever transport it has. `why` is the core's explanation over the job's and
the UltraServers' statuses (`ultraplane.documents.explanation_inputs`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from ultraplane.api.client.transports import ClientError, not_found

from ultraplane.documents.conversions import (
    GROUP,
    PLURALS,
    POWERBUDGETS,
    TENANTQUEUES,
    ULTRASERVERS,
    VERSION,
    allocated_chips,
)
from ultraplane.documents.explanation_inputs import explain_documents, seconds
from ultraplane.hardware.profiles import load_profile

TIMEOUT_S = 15


def api_client(kubeconfig: str | None, context: str | None) -> tuple[Any, str]:
    """A Kubernetes API client whose server answered, and the context's namespace; no usable
    cluster is a ClientError (exit 2) in one sentence (`ultraplane.kubeclients`)."""
    from ultraplane.kubeclients import ClusterAccess, ClusterUnavailable, connect

    access = ClusterAccess(kubeconfig, context)
    try:
        api = connect(access)
    except ClusterUnavailable as exc:
        raise ClientError(f"{str(exc).rstrip('.')}; or give --server URL for the REST API.",
                          2) from None
    api.configuration.retries = 1  # an unreachable cluster answers in seconds, not minutes
    return api, _namespace(access)


def _namespace(access: Any) -> str:
    """The namespace of the kubeconfig context in use (a pod's own, in a pod)."""
    from kubernetes import config

    if access.in_cluster:
        try:
            with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
                return f.read().strip() or "default"
        except OSError:
            return "default"
    try:
        contexts, active = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=access.kubeconfig)
    except (config.ConfigException, OSError):
        return "default"
    chosen = next((c for c in contexts if c["name"] == access.context), active) \
        if access.context else active
    return str(((chosen or {}).get("context") or {}).get("namespace") or "default")


class ClusterTransport:
    """Reads and writes TrainingJobs, InferenceJobs and UltraServers as kubectl would."""

    def __init__(self, kubeconfig: str | None, context: str | None,
                 namespace: str | None) -> None:
        from kubernetes import client

        api, own = api_client(kubeconfig, context)
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace or own
        self.where = f"the cluster of context {context}" if context else "the cluster"

    def _call(self, fn: Callable[..., object], *args: Any,
              what: tuple[str, str] | None = None, **kwargs: Any) -> dict[str, Any]:
        """One call's JSON body (the client types it `object`); errors as ClientErrors."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return dict(cast(Mapping[str, Any], fn(*args, _request_timeout=TIMEOUT_S, **kwargs)))
        except ApiException as exc:
            if exc.status == 404 and what is not None:
                raise not_found(*what) from None
            try:
                body = json.loads(exc.body or "{}")
            except ValueError:
                body = {}
            reason = body.get("reason") or exc.reason
            message = body.get("message") or str(exc.reason)
            raise ClientError(f"Error from server ({reason}): {message}",
                              2 if exc.status in (400, 422) else 1) from None
        except HTTPError as exc:
            raise ClientError(f"cannot reach {self.where} ({type(exc).__name__}: {exc}).",
                              2) from None

    # -- jobs --------------------------------------------------------------------------------
    def list_jobs(self, kind: str, namespace: str | None) -> list[dict[str, Any]]:
        plural = PLURALS[kind]
        if namespace is None:
            got = self._call(self.custom.list_cluster_custom_object, GROUP, VERSION, plural)
        else:
            got = self._call(self.custom.list_namespaced_custom_object, GROUP, VERSION,
                             namespace, plural)
        return [_job(kind, obj) for obj in got.get("items") or []]

    def get_job(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        obj = self._call(self.custom.get_namespaced_custom_object, GROUP, VERSION, namespace,
                         PLURALS[kind], name, what=(kind, name))
        return _job(kind, obj)

    def create_job(self, kind: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        meta = body.get("metadata") or {}
        sent = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind,
                "metadata": {"name": meta.get("name"), "namespace": namespace,
                             **({"labels": meta["labels"]} if meta.get("labels") else {})},
                "spec": body.get("spec")}
        obj = self._call(self.custom.create_namespaced_custom_object, GROUP, VERSION, namespace,
                         PLURALS[kind], sent)
        return _job(kind, obj)

    def delete_job(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        job = self.get_job(kind, namespace, name)
        self._call(self.custom.delete_namespaced_custom_object, GROUP, VERSION, namespace,
                   PLURALS[kind], name, what=(kind, name))
        return job

    # -- fleet -------------------------------------------------------------------------------
    def ultraservers(self) -> list[dict[str, Any]]:
        got = self._call(self.custom.list_cluster_custom_object, GROUP, VERSION, ULTRASERVERS)
        return [_view(obj) for obj in got.get("items") or []]

    def tenant_queues(self) -> list[dict[str, Any]]:
        return self._cluster_objects(TENANTQUEUES)

    def power_budgets(self) -> list[dict[str, Any]]:
        return self._cluster_objects(POWERBUDGETS)

    def _cluster_objects(self, plural: str) -> list[dict[str, Any]]:
        got = self._call(self.custom.list_cluster_custom_object, GROUP, VERSION, plural)
        return sorted(got.get("items") or [], key=lambda q: str(q["metadata"]["name"]))

    def explain(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        job = self.get_job(kind, namespace, name)
        views = self.ultraservers()
        try:  # everyone's jobs, when the caller may list them cluster-wide
            holders = [j for k in PLURALS for j in self.list_jobs(k, None)]
            visible: Callable[[str], bool] = lambda _ns: True  # noqa: E731
        except ClientError:
            holders = [j for k in PLURALS for j in self.list_jobs(k, namespace)]
            visible = namespace.__eq__
        return explain_documents(job, views, holders, now_s=time.time(), visible=visible).wire()

    def accounting(self, namespace: str | None, name: str | None) -> list[dict[str, Any]]:
        """Rows from the jobs' own statuses (the REST API keeps history past deletion; a
        cluster holds only the jobs that still exist)."""
        now = time.time()
        rows = []
        for kind in PLURALS:
            for job in self.list_jobs(kind, namespace):
                if name is None or job["metadata"]["name"] == name:
                    rows.append(_accounting(job, now))
        return sorted(rows, key=lambda r: r["submittedS"] or 0.0)


def _job(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {"apiVersion": obj.get("apiVersion", f"{GROUP}/{VERSION}"), "kind": kind,
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "creationTimestamp",
                                              "labels") if k in meta},
            "spec": obj.get("spec") or {}, "status": obj.get("status") or {}}


def _view(obj: dict[str, Any]) -> dict[str, Any]:
    """An UltraServer resource as the REST API's UltraServer view."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    capacity, allocated, free = (status.get(k) or {} for k in ("capacity", "allocated", "free"))
    profile = str(spec.get("profile") or "")
    chips = int(capacity.get("chips") or 0)
    if not chips:
        try:
            p = load_profile(profile)
            chips = int(spec.get("servers") or p.servers_per_ultraserver) * p.chips_per_server
        except ValueError:
            chips = 0
    used = int(allocated.get("chips") or 0)
    return {"name": (obj.get("metadata") or {}).get("name", ""), "profile": profile,
            "network": list(spec.get("network") or []),
            "schedulable": bool(spec.get("schedulable", True)), "chips": chips,
            "allocatedChips": used, "freeChips": int(free.get("chips", max(0, chips - used))),
            "failedChips": sorted(spec.get("failedChips") or []),
            "jobs": list(status.get("jobs") or []),
            "utilization": float(status.get("utilization") or 0.0),
            "powerWatts": float(status.get("powerWatts") or 0.0),
            "reservedFor": status.get("reservedFor") or None}


def _accounting(job: dict[str, Any], now_s: float) -> dict[str, Any]:
    meta, spec, status = job["metadata"], job["spec"], job["status"]
    phase = str(status.get("phase") or "Pending")
    chips = int(status.get("chips") or spec.get("chips") or 0) or len(allocated_chips(status))
    if job["kind"] == "InferenceJob" and not status.get("chips"):
        chips = int(spec.get("chipsPerReplica") or 0) * int(spec.get("replicas") or 1)
    submitted, started = seconds(meta.get("creationTimestamp")), seconds(status.get("startTime"))
    finished = seconds(status.get("completionTime")) if phase in ("Succeeded", "Failed") else None
    chip_hours = status.get("chipHours")
    if chip_hours is None:
        chip_hours = chips * max(0.0, (finished or now_s) - started) / 3600 if started else 0.0
    return {"jobUid": meta.get("uid", ""), "kind": job["kind"], "namespace": meta["namespace"],
            "name": meta["name"], "chips": chips, "phase": phase, "submittedS": submitted,
            "startedS": started, "finishedS": finished, "chipHours": float(chip_hours),
            "energyKWh": float(status.get("energyKWh") or 0.0),
            "completionTimeS": None if finished is None or submitted is None
            else finished - submitted}
