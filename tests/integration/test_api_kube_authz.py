"""Authorization in Kubernetes mode, on the real API server tier (kube-apiserver with RBAC).

    namespace <victim>                  namespace <other>
      ServiceAccount intruder  (no RBAC)   ServiceAccount member's rights do not reach here
      ServiceAccount member    Role: create/get/list/delete trainingjobs

The REST API runs as the tier's admin (as the chart's API runs with its own
ServiceAccount), with TokenReview on. The escalation the issue found: a
ServiceAccount that `kubectl auth can-i` refuses created and deleted jobs
through the API. Here every such request is a 403, and what RBAC grants works.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from ultraplane.api.app import create_app
from ultraplane.api.settings import Settings

pytestmark = pytest.mark.kube

JOB = {"chips": 1152, "priority": 1_000_000, "preemptible": False,
       "work": {"durationSeconds": 3600}}


def _token(kube_env: Any, namespace: str, name: str) -> str:
    kube_env.kubectl("create", "serviceaccount", name, "-n", namespace)
    return str(kube_env.kubectl("create", "token", name, "-n", namespace).stdout.strip())


@pytest.fixture
def other_namespace(kube_env: Any) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    kube_env.kubectl("create", "namespace", name)
    yield name
    kube_env.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def api(kube_env: Any, tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(backend="kubernetes", kubeconfig=str(kube_env.kubeconfig),
                        db=f"sqlite:///{tmp_path / 'k.db'}", tick_seconds=3600, token_review=True)
    with TestClient(create_app(settings)) as client:
        yield client


def _as(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_api_never_does_what_kubectl_would_refuse(
    api: TestClient, kube_env: Any, kube_namespace: str, other_namespace: str
) -> None:
    victim = kube_namespace
    intruder = _token(kube_env, victim, "intruder")
    member = _token(kube_env, victim, "member")
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "jobs", "namespace": victim},
            "rules": [{"apiGroups": ["ultraplane.dev"], "resources": ["trainingjobs"],
                       "verbs": ["create", "get", "list", "delete"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "jobs", "namespace": victim},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "jobs"},
               "subjects": [{"kind": "ServiceAccount", "name": "member", "namespace": victim}]}
    kube_env.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([role, binding]))
    # What kubectl says, as the issue checked it.
    can_i = kube_env.kubectl("auth", "can-i", "create", "trainingjobs.ultraplane.dev", "-n", victim,
                             f"--as=system:serviceaccount:{victim}:intruder", check=False)
    assert can_i.stdout.strip() == "no"

    base = f"/v1/namespaces/{victim}/trainingjobs"
    body = {"metadata": {"name": "takeover"}, "spec": JOB}
    r = api.post(base, json=body, headers=_as(intruder))
    assert r.status_code == 403, r.text
    assert r.json()["message"].startswith(
        f"system:serviceaccount:{victim}:intruder may not create trainingjobs in namespace {victim}")
    assert "takeover" not in kube_env.kubectl("get", "trainingjobs", "-n", victim, "-o", "name").stdout

    # A job that exists (made by the admin): the intruder can neither read nor delete it.
    kube_env.kubectl("apply", "-n", victim, "-f", "-", input=json.dumps({
        "apiVersion": "ultraplane.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": "precious"}, "spec": {"chips": 4, "work": {"durationSeconds": 60}}}))
    for method, path in (("DELETE", f"{base}/precious"), ("GET", f"{base}/precious"),
                         ("GET", base), ("GET", "/v1/trainingjobs"),
                         ("GET", f"/v1/accounting/jobs?namespace={victim}")):
        r = api.request(method, path, headers=_as(intruder))
        assert r.status_code == 403, (method, path, r.text)
    kube_env.kubectl("get", "trainingjob", "precious", "-n", victim)  # still there

    # What RBAC grants goes through; nothing beyond it.
    assert api.post(base, json=body, headers=_as(member)).status_code == 201
    assert api.get(base, headers=_as(member)).status_code == 200
    assert api.delete(f"{base}/takeover", headers=_as(member)).status_code == 200
    assert api.post(f"/v1/namespaces/{victim}/inferencejobs", headers=_as(member), json={
        "metadata": {"name": "x"}, "spec": {"chipsPerReplica": 4}}).status_code == 403
    assert api.post(f"/v1/namespaces/{other_namespace}/trainingjobs", json=body,
                    headers=_as(member)).status_code == 403
    assert api.get("/v1/trainingjobs", headers=_as(member)).status_code == 403  # all namespaces

    # Unknown tokens and no token are 401; fleet-wide reads stay open by default.
    assert api.post(base, json=body, headers=_as("not-a-token")).status_code == 401
    assert api.post(base, json=body).status_code == 401
    assert api.get("/v1/capacity").status_code == 200
