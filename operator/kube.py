"""The operator's writes and listings through the Kubernetes API (the only module that calls it).

Why the synchronous client in a thread pool: kopf owns the watch streams; the operator's own
writes are few per job, need optimistic concurrency (a `resourceVersion` precondition in a merge
patch, 409 on conflict) and must run many at once without blocking kopf's event loop, so a
bounded pool of workers with one pooled HTTP connection each does the work.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any, cast

from ultraplane.operator.jobviews import (
    FINALIZER,
    FLEET_LABEL,
    GROUP,
    PLURALS,
    POWERBUDGETS,
    TENANTCOHORTS,
    TENANTQUEUES,
    ULTRASERVERS,
    VERSION,
)

from ultraplane import kubeclients
from ultraplane.kubeclients import ClusterAccess

MERGE = "application/merge-patch+json"
APPLY = "application/apply-patch+yaml"
FIELD_MANAGER = "ultraplane-nodes"
log = logging.getLogger("ultraplane.operator")



def _body(result: object) -> dict[str, Any]:
    """A custom-objects call's JSON body (the client types it `object`)."""
    return dict(cast(Mapping[str, Any], result))


def _items(result: object) -> list[dict[str, Any]]:
    return list(cast(Mapping[str, Any], result).get("items", []))


def _release(response: object) -> None:
    """Read a raw (`_preload_content=False`) response to its end and hand its connection back
    to the pool. The client returns such a response unread, and urllib3 reuses a connection
    only once its response is consumed: left as it was, every pod create and delete opened a
    new TLS connection (the handshake cost the operator and the API server more CPU than the
    request itself)."""
    drain = getattr(response, "drain_conn", None)
    if drain is not None:
        drain()
        response.release_conn()  # type: ignore[attr-defined]  # urllib3.HTTPResponse


def connection_info(access: ClusterAccess) -> Any:
    """kopf's credentials from the same set-up as the operator's own client, so its watches
    follow --kubeconfig and --context too (kopf's default login reads only the defaults)."""
    import kopf

    config = kubeclients.configuration(access)
    header = (config.get_api_key_with_prefix("BearerToken")
              or config.get_api_key_with_prefix("authorization"))
    scheme, _, token = (header or "").rpartition(" ")
    return kopf.ConnectionInfo(
        server=config.host, ca_path=config.ssl_ca_cert, insecure=not config.verify_ssl,
        username=config.username or None, password=config.password or None,
        scheme=scheme or None, token=token or None, certificate_path=config.cert_file,
        private_key_path=config.key_file)


class Conflict(Exception):
    """The object changed since we read it (HTTP 409)."""


class Gone(Exception):
    """The object no longer exists (HTTP 404)."""


class Rejected(Exception):
    """The API server refused the object itself (HTTP 400, 403, 422): retrying cannot help."""


def api_message(exc: Exception) -> str:
    """The API server's own sentence from an ApiException body, else the exception text."""
    import json

    try:
        return str(json.loads(getattr(exc, "body", "") or "{}").get("message") or exc)
    except ValueError:
        return str(exc)


def _translate(exc: Exception) -> Exception:
    status = getattr(exc, "status", None)
    if status in (400, 403, 422):
        return Rejected(api_message(exc))
    if status == 409:
        return Conflict(str(exc))
    if status == 404:
        return Gone(str(exc))
    return exc


class KubeClient:
    """Thin wrapper over `CustomObjectsApi` for the kinds the operator touches; job calls name
    the job's plural (`trainingjobs` or `inferencejobs`)."""

    def __init__(self, *, pool_size: int = 16, access: ClusterAccess | None = None,
                 api_client: Any = None) -> None:
        import kubernetes

        # the one client set-up (`ultraplane/kubeclients.py`): --kubeconfig, --context
        self._api_client: kubernetes.client.ApiClient = (
            api_client or kubeclients.api_client(access, pool_size=pool_size))
        self.custom = kubernetes.client.CustomObjectsApi(self._api_client)
        self.coordination = kubernetes.client.CoordinationV1Api(self._api_client)
        self.core = kubernetes.client.CoreV1Api(self._api_client)

    # -- listings ----------------------------------------------------------------------
    def list_ultraservers(self, fleet: str | None = None) -> list[dict[str, Any]]:
        selector = f"{FLEET_LABEL}={fleet}" if fleet else None
        result = self.custom.list_cluster_custom_object(
            GROUP, VERSION, ULTRASERVERS, label_selector=selector)
        return _items(result)

    def list_jobs(self, namespaces: list[str] | None) -> list[dict[str, Any]]:
        """Every TrainingJob and InferenceJob, each with its `kind` set."""
        items: list[dict[str, Any]] = []
        for kind, plural in PLURALS.items():
            try:
                items.extend({"kind": kind, **item} for item in self._list(plural, namespaces))
            except Gone:  # that CRD is not installed: nothing of the kind to adopt
                log.warning("no %s resource on the API server; not listing it", plural)
        return items

    def _list(self, plural: str, namespaces: list[str] | None) -> list[dict[str, Any]]:
        try:
            if not namespaces:
                result = self.custom.list_cluster_custom_object(GROUP, VERSION, plural)
                return _items(result)
            items: list[dict[str, Any]] = []
            for ns in namespaces:
                result = self.custom.list_namespaced_custom_object(GROUP, VERSION, ns, plural)
                items.extend(_items(result))
            return items
        except Exception as exc:
            raise _translate(exc) from exc

    def get_job(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        try:
            return _body(self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, name))
        except Exception as exc:
            raise _translate(exc) from exc

    # -- writes ------------------------------------------------------------------------
    def patch_job_status(self, plural: str, namespace: str, name: str,
                         status: Mapping[str, Any], resource_version: str) -> dict[str, Any]:
        """Merge-patch `status`, failing with `Conflict` if the object moved past the version."""
        body: dict[str, Any] = {"status": dict(status)}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        try:
            return _body(self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, plural, name, body, _content_type=MERGE))
        except Exception as exc:
            raise _translate(exc) from exc

    def scale_job(self, plural: str, namespace: str, name: str, replicas: int) -> None:
        """Set spec.replicas through the scale subresource, as `kubectl scale` does."""
        try:
            self.custom.patch_namespaced_custom_object_scale(
                GROUP, VERSION, namespace, plural, name, {"spec": {"replicas": replicas}},
                _content_type=MERGE)
        except Exception as exc:
            raise _translate(exc) from exc

    def set_finalizer(self, plural: str, namespace: str, name: str, finalizers: list[str],
                      present: bool, resource_version: str) -> dict[str, Any]:
        kept = [f for f in finalizers if f != FINALIZER] + ([FINALIZER] if present else [])
        body = {"metadata": {"finalizers": kept, "resourceVersion": resource_version}}
        try:
            return _body(self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, name, body, _content_type=MERGE))
        except Exception as exc:
            raise _translate(exc) from exc

    def list_tenantqueues(self, fleet: str | None = None) -> list[dict[str, Any]]:
        """TenantQueues (of the fleet, if one is named); none when the CRD is not installed."""
        return self._list_cluster(TENANTQUEUES, fleet)

    def list_tenantcohorts(self, fleet: str | None = None) -> list[dict[str, Any]]:
        """TenantCohorts (of the fleet, if one is named); none when the CRD is not installed."""
        return self._list_cluster(TENANTCOHORTS, fleet)

    def patch_tenantcohort_status(self, name: str, status: Mapping[str, Any]) -> None:
        try:
            self.custom.patch_cluster_custom_object_status(
                GROUP, VERSION, TENANTCOHORTS, name, {"status": dict(status)},
                _content_type=MERGE)
        except Exception as exc:
            raise _translate(exc) from exc

    def list_powerbudgets(self, fleet: str | None = None) -> list[dict[str, Any]]:
        """PowerBudgets (of the fleet, if one is named); none when the CRD is not installed."""
        return self._list_cluster(POWERBUDGETS, fleet)

    def patch_powerbudget_status(self, name: str, status: Mapping[str, Any]) -> None:
        try:
            self.custom.patch_cluster_custom_object_status(
                GROUP, VERSION, POWERBUDGETS, name, {"status": dict(status)}, _content_type=MERGE)
        except Exception as exc:
            raise _translate(exc) from exc

    def _list_cluster(self, plural: str, fleet: str | None) -> list[dict[str, Any]]:
        selector = f"{FLEET_LABEL}={fleet}" if fleet else None
        try:
            result = self.custom.list_cluster_custom_object(
                GROUP, VERSION, plural, label_selector=selector)
        except Exception as exc:
            error = _translate(exc)
            if isinstance(error, Gone):
                log.warning("no %s resource on the API server; none listed", plural)
                return []
            raise error from exc
        return _items(result)

    def patch_tenantqueue_status(self, name: str, status: Mapping[str, Any]) -> None:
        try:
            self.custom.patch_cluster_custom_object_status(
                GROUP, VERSION, TENANTQUEUES, name, {"status": dict(status)}, _content_type=MERGE)
        except Exception as exc:
            raise _translate(exc) from exc

    def patch_ultraserver_status(self, name: str, status: Mapping[str, Any]) -> None:
        try:
            self.custom.patch_cluster_custom_object_status(
                GROUP, VERSION, ULTRASERVERS, name, {"status": dict(status)}, _content_type=MERGE)
        except Exception as exc:
            raise _translate(exc) from exc

    # -- UltraServers from Nodes (operator/discovery.py) ----------------------------------
    def list_nodes(self, label: str) -> list[dict[str, Any]]:
        """Nodes carrying `label`, as JSON bodies, a page of 500 at a time."""
        import json

        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            try:
                response = self.core.list_node(label_selector=label, limit=500,
                                               _continue=token, _preload_content=False)
            except Exception as exc:
                raise _translate(exc) from exc
            page = json.loads(response.data)  # type: ignore[attr-defined]  # raw response
            items.extend(page.get("items", []))
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    def list_owned_ultraservers(self, selector: str) -> list[dict[str, Any]]:
        result = self.custom.list_cluster_custom_object(
            GROUP, VERSION, ULTRASERVERS, label_selector=selector)
        return _items(result)

    def get_ultraserver(self, name: str) -> dict[str, Any]:
        try:
            return _body(self.custom.get_cluster_custom_object(GROUP, VERSION, ULTRASERVERS, name))
        except Exception as exc:
            raise _translate(exc) from exc

    def apply_ultraserver(self, body: Mapping[str, Any]) -> None:
        """Server-side apply of the fields in `body` (creates the object when absent)."""
        name = str(body["metadata"]["name"])
        try:
            self.custom.patch_cluster_custom_object(
                GROUP, VERSION, ULTRASERVERS, name, dict(body), field_manager=FIELD_MANAGER,
                force=True, _content_type=APPLY)
        except Exception as exc:
            raise _translate(exc) from exc

    def delete_ultraserver(self, name: str) -> None:
        try:
            self.custom.delete_cluster_custom_object(GROUP, VERSION, ULTRASERVERS, name)
        except Exception as exc:
            raise _translate(exc) from exc

    # -- the pod data plane (operator/pods.py) --------------------------------------------
    def _send(self, method: str, path: str, params: Mapping[str, str],
              body: Mapping[str, Any]) -> None:
        """One request with a plain JSON body; the answer is read and dropped. The generated
        methods validate a dict body into the client's pydantic models and serialize those
        back (for a pod, more CPU than the request itself); the API server validates anyway."""
        from kubernetes.client.exceptions import ApiException

        # no body here: `param_serialize` would walk it key by key (`sanitize_for_serialization`,
        # a third of a pod create's client CPU); the REST layer sends a dict with json.dumps
        method, url, headers, _, _ = self._api_client.param_serialize(
            method=method, resource_path=path, path_params=dict(params), body=None,
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            auth_settings=["BearerToken"])
        response = self._api_client.call_api(method, url, headers, body)
        response.read()  # type: ignore[no-untyped-call]  # the connection goes back to the pool
        if not 200 <= response.status <= 299:
            raise ApiException(http_resp=response)

    def create_pod(self, namespace: str, body: Mapping[str, Any]) -> None:
        """Create a pod; `Conflict` when one of that name exists, `Rejected` when invalid."""
        try:
            self._send("POST", "/api/v1/namespaces/{namespace}/pods", {"namespace": namespace},
                       body)
        except Exception as exc:
            raise _translate(exc) from exc

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None) -> None:
        """None: the pod's own `terminationGracePeriodSeconds`."""
        options = {} if grace_seconds is None else {"gracePeriodSeconds": grace_seconds}
        try:
            self._send("DELETE", "/api/v1/namespaces/{namespace}/pods/{name}",
                       {"namespace": namespace, "name": name}, options)
        except Exception as exc:
            raise _translate(exc) from exc

    def label_pod(self, namespace: str, name: str, labels: Mapping[str, str]) -> None:
        try:
            _release(self.core.patch_namespaced_pod(
                name, namespace, {"metadata": {"labels": dict(labels)}}, _preload_content=False))
        except Exception as exc:
            raise _translate(exc) from exc

    def create_service(self, namespace: str, body: Mapping[str, Any]) -> None:
        try:
            _release(self.core.create_namespaced_service(
                namespace, dict(body), _preload_content=False))  # type: ignore[arg-type]
        except Exception as exc:
            raise _translate(exc) from exc

    def delete_service(self, namespace: str, name: str) -> None:
        try:
            _release(self.core.delete_namespaced_service(name, namespace,
                                                         _preload_content=False))
        except Exception as exc:
            raise _translate(exc) from exc

    # -- the pod data plane's own watch (operator/podwatch.py) ----------------------------
    def list_pods(self, namespace: str | None, label: str) -> tuple[list[dict[str, Any]], str]:
        """Pods carrying `label` (None: every namespace) and the list's resourceVersion."""
        import json

        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            try:
                if namespace is None:
                    response = self.core.list_pod_for_all_namespaces(
                        label_selector=label, limit=500, _continue=token, _preload_content=False)
                else:
                    response = self.core.list_namespaced_pod(
                        namespace, label_selector=label, limit=500, _continue=token,
                        _preload_content=False)
            except Exception as exc:
                raise _translate(exc) from exc
            page = json.loads(response.data)  # type: ignore[attr-defined]  # raw response
            items.extend(page.get("items", []))
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return items, str(meta.get("resourceVersion") or "")

    def watch_pods(self, namespace: str | None, label: str, resource_version: str,
                   timeout_seconds: int) -> Iterator[list[bytes]]:
        """The watch's event lines (raw JSON), a list per chunk read; ends when the server
        closes the watch. `podwatch.Expired` when `resource_version` is too old."""
        from ultraplane.operator.podwatch import Expired

        args: dict[str, Any] = {
            "label_selector": label, "watch": True, "resource_version": resource_version,
            "allow_watch_bookmarks": True, "timeout_seconds": timeout_seconds,
            "_preload_content": False, "_request_timeout": (30, timeout_seconds + 60)}
        response: Any  # raw (`_preload_content=False`): a urllib3 response
        try:
            response = (self.core.list_pod_for_all_namespaces(**args) if namespace is None
                        else self.core.list_namespaced_pod(namespace, **args))
        except Exception as exc:
            if getattr(exc, "status", None) == 410:
                raise Expired(str(exc)) from exc
            raise _translate(exc) from exc
        try:
            rest = b""
            for chunk in response.stream(65536):
                *lines, rest = (rest + chunk).split(b"\n")
                lines = [line for line in lines if line.strip()]
                if lines:
                    yield lines
        finally:
            response.close()  # a watch's connection is not reused (it may be half read)
