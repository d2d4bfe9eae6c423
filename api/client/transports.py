"""Where the client's commands go: the REST API, or a cluster (`clusters.py`), one interface.

Why an interface: every command (get, describe, apply, delete, top, why, accounting) is written
once against `Transport` and works the same whether it talks to `ultraplane serve` or straight
to a cluster's custom resources. Failures become `ClientError`s carrying the exit code and one
sentence: 1 for what the server refused or did not find (as kubectl), 2 for bad input and for a
server or cluster that cannot be reached.
"""

from __future__ import annotations

from typing import Any, Protocol

import httpx

from ultraplane.documents.conversions import PLURALS

__all__ = ["ClientError", "RestTransport", "Transport", "not_found"]


class ClientError(Exception):
    """One sentence for the user, and the exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def not_found(kind: str, name: str) -> ClientError:
    return ClientError(
        f'Error from server (NotFound): {PLURALS.get(kind, kind.lower())}.ultraplane.dev '
        f'"{name}" not found', 1)


class Transport(Protocol):
    """What the commands need; documents are the REST API's (camelCase, resource-shaped)."""

    where: str  # the server URL or the kubeconfig context, for messages
    namespace: str  # the default namespace (-n, else the context's, else `default`)

    def list_jobs(self, kind: str, namespace: str | None) -> list[dict[str, Any]]: ...
    def get_job(self, kind: str, namespace: str, name: str) -> dict[str, Any]: ...
    def create_job(self, kind: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...
    def delete_job(self, kind: str, namespace: str, name: str) -> dict[str, Any]: ...
    def ultraservers(self) -> list[dict[str, Any]]: ...
    def tenant_queues(self) -> list[dict[str, Any]]: ...
    def power_budgets(self) -> list[dict[str, Any]]: ...
    def explain(self, kind: str, namespace: str, name: str) -> dict[str, Any]: ...
    def accounting(self, namespace: str | None, name: str | None) -> list[dict[str, Any]]: ...


class RestTransport:
    """The REST API of `ultraplane serve` (either backend), with an optional bearer token."""

    def __init__(self, server: str, *, token: str | None, namespace: str | None,
                 timeout: float = 30.0) -> None:
        if not server.startswith(("http://", "https://")):
            raise ClientError(f"--server: {server!r} is not an http:// or https:// URL.", 2)
        self.where = server.rstrip("/")
        self.namespace = namespace or "default"
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.where, headers=headers, timeout=timeout)

    def _call(self, method: str, path: str, *, what: tuple[str, str] | None = None,
              **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ClientError(f"cannot reach the Ultraplane API at {self.where} "
                              f"({type(exc).__name__}: {exc or 'no answer'}).", 2) from None
        if response.status_code < 400:
            return response.json()
        try:
            body = response.json()
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        if response.status_code == 404 and what is not None:
            raise not_found(*what)
        error = body.get("error") or response.reason_phrase
        message = body.get("message") or response.text[:200]
        field = body.get("field")
        where = f" ({field})" if field and field not in str(message) else ""
        code = 2 if response.status_code in (400, 422) else 1
        raise ClientError(f"Error from server ({error}): {message}{where}", code)

    def _pages(self, path: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        cont: str | None = None
        while True:
            page = self._call("GET", path, params={**params, **({"continue": cont} if cont else {})})
            items += page.get("items") or []
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                return items

    def list_jobs(self, kind: str, namespace: str | None) -> list[dict[str, Any]]:
        plural = PLURALS[kind]
        if namespace is None:
            return self._pages(f"/v1/{plural}", {"limit": 1000})
        return self._pages(f"/v1/namespaces/{namespace}/{plural}", {"limit": 1000})

    def get_job(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/v1/namespaces/{namespace}/{PLURALS[kind]}/{name}",
                               what=(kind, name)))

    def create_job(self, kind: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        meta = body.get("metadata") or {}
        sent = {"metadata": {k: meta[k] for k in ("name", "labels") if k in meta},
                "spec": body.get("spec")}
        return dict(self._call("POST", f"/v1/namespaces/{namespace}/{PLURALS[kind]}", json=sent))

    def delete_job(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        return dict(self._call("DELETE", f"/v1/namespaces/{namespace}/{PLURALS[kind]}/{name}",
                               what=(kind, name)))

    def ultraservers(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/v1/ultraservers").get("items") or [])

    def tenant_queues(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/v1/tenantqueues").get("items") or [])

    def power_budgets(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/v1/powerbudgets").get("items") or [])

    def explain(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        return dict(self._call(
            "GET", f"/v1/namespaces/{namespace}/{PLURALS[kind]}/{name}/explanation",
            what=(kind, name)))

    def accounting(self, namespace: str | None, name: str | None) -> list[dict[str, Any]]:
        params = {k: v for k, v in (("namespace", namespace), ("name", name)) if v}
        rows: list[dict[str, Any]] = []
        while True:
            page = self._call("GET", "/v1/accounting/jobs",
                              params={**params, "limit": 1000, "offset": len(rows)})
            rows += page
            if len(page) < 1000:
                return rows
