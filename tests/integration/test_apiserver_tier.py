"""Proves the kube tier is a real API server, not a mock.

Each test checks a behaviour the operator depends on and that an in-process mock (kmock 0.8,
tried in issue 3) gets wrong: versioned resourceVersions, optimistic-concurrency conflicts,
watch resumption, finalizers, and the status subresource of a custom resource.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.integration.kube_tier import KubeEnv

TEST_GROUP = "tier.test.ultraplane.dev"
WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{TEST_GROUP}"},
    "spec": {
        "group": TEST_GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"size": {"type": "integer", "minimum": 1}},
                            },
                            "status": {
                                "type": "object",
                                "properties": {"phase": {"type": "string"}},
                            },
                        },
                    }
                },
            }
        ],
    },
}


@pytest.fixture(scope="module")
def api(kube_env: KubeEnv) -> Iterator[client.ApiClient]:
    with kube_env.api_client() as api_client:
        yield api_client


@pytest.fixture(scope="module")
def widgets(kube_env: KubeEnv) -> Iterator[str]:
    """Installs the tiny Widget CRD of this module and removes it afterwards."""
    kube_env.kubectl("apply", "-f", "-", input=json.dumps(WIDGET_CRD))
    name = WIDGET_CRD["metadata"]["name"]  # type: ignore[index]
    kube_env.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{name}")
    yield name
    kube_env.kubectl("delete", f"crd/{name}", "--wait=false", check=False)


def _config_map(name: str, **data: str) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data=dict(data))


def test_server_is_kubernetes_1_37(kube_env: KubeEnv, api: client.ApiClient) -> None:
    info = client.VersionApi(api).get_code()
    assert info.git_version.startswith("v1.37."), info.git_version
    out = json.loads(kube_env.kubectl("version", "-o", "json").stdout)
    assert out["serverVersion"]["gitVersion"] == info.git_version
    assert out["clientVersion"]["gitVersion"].startswith("v1.37.")


def test_updates_change_resource_version_and_stale_writes_conflict(
    api: client.ApiClient, kube_namespace: str
) -> None:
    core = client.CoreV1Api(api)
    created = core.create_namespaced_config_map(kube_namespace, _config_map("cm", step="1"))
    rv1 = created.metadata.resource_version
    assert rv1

    created.data = {"step": "2"}
    updated = core.replace_namespaced_config_map("cm", kube_namespace, created)
    assert updated.metadata.resource_version != rv1

    # `created` still carries rv1: the server must refuse to overwrite the newer object.
    created.data = {"step": "stale"}
    created.metadata.resource_version = rv1
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_config_map("cm", kube_namespace, created)
    assert err.value.status == 409
    assert json.loads(err.value.body)["reason"] == "Conflict"
    assert core.read_namespaced_config_map("cm", kube_namespace).data == {"step": "2"}


def test_watch_resumes_from_a_resource_version(
    api: client.ApiClient, kube_namespace: str
) -> None:
    core = client.CoreV1Api(api)
    start = core.create_namespaced_config_map(kube_namespace, _config_map("w", step="0"))
    # Changes made while nobody watches must still be delivered from `start` on, in order.
    for step in ("1", "2", "3"):
        core.patch_namespaced_config_map("w", kube_namespace, {"data": {"step": step}})

    seen: list[tuple[str, str]] = []
    stream = watch.Watch()
    for event in stream.stream(
        core.list_namespaced_config_map,
        kube_namespace,
        field_selector="metadata.name=w",
        resource_version=start.metadata.resource_version,
        timeout_seconds=10,
    ):
        seen.append((event["type"], event["object"].data["step"]))
        if len(seen) == 3:
            stream.stop()
    assert seen == [("MODIFIED", "1"), ("MODIFIED", "2"), ("MODIFIED", "3")]


def test_finalizer_blocks_deletion_until_removed(
    api: client.ApiClient, kube_namespace: str
) -> None:
    core = client.CoreV1Api(api)
    cm = _config_map("held")
    cm.metadata.finalizers = ["tier.test.ultraplane.dev/hold"]
    core.create_namespaced_config_map(kube_namespace, cm)

    core.delete_namespaced_config_map("held", kube_namespace)
    still = core.read_namespaced_config_map("held", kube_namespace)
    assert still.metadata.deletion_timestamp is not None
    assert still.metadata.finalizers == ["tier.test.ultraplane.dev/hold"]

    core.patch_namespaced_config_map("held", kube_namespace, {"metadata": {"finalizers": None}})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            core.read_namespaced_config_map("held", kube_namespace)
        except ApiException as exc:
            assert exc.status == 404
            return
        time.sleep(0.1)
    pytest.fail("the ConfigMap still exists 10s after its last finalizer was removed")


def test_status_subresource_separates_spec_and_status(
    api: client.ApiClient, kube_namespace: str, widgets: str
) -> None:
    crs = client.CustomObjectsApi(api)
    args = (TEST_GROUP, "v1", kube_namespace, "widgets")
    body: dict[str, Any] = {
        "apiVersion": f"{TEST_GROUP}/v1",
        "kind": "Widget",
        "metadata": {"name": "w1"},
        "spec": {"size": 2},
        "status": {"phase": "Forged"},
    }
    created = crs.create_namespaced_custom_object(*args, body)
    assert "status" not in created or created["status"] in ({}, None)
    generation = created["metadata"]["generation"]

    # Through the main resource, a status change is ignored and does not bump generation.
    crs.patch_namespaced_custom_object(*args, "w1", {"status": {"phase": "Forged"}})
    after = crs.get_namespaced_custom_object(*args, "w1")
    assert after.get("status") in ({}, None)
    assert after["metadata"]["generation"] == generation

    # Through /status, status changes and a spec change is ignored.
    crs.patch_namespaced_custom_object_status(
        *args, "w1", {"status": {"phase": "Ready"}, "spec": {"size": 99}}
    )
    after = crs.get_namespaced_custom_object(*args, "w1")
    assert after["status"] == {"phase": "Ready"}
    assert after["spec"] == {"size": 2}

    # A spec change bumps generation; the schema is enforced and unknown fields are pruned.
    crs.patch_namespaced_custom_object(*args, "w1", {"spec": {"size": 3, "colour": "red"}})
    after = crs.get_namespaced_custom_object(*args, "w1")
    assert after["spec"] == {"size": 3}
    assert after["metadata"]["generation"] == generation + 1
    with pytest.raises(ApiException) as err:
        crs.patch_namespaced_custom_object(*args, "w1", {"spec": {"size": 0}})
    assert err.value.status == 422
    assert "spec.size" in err.value.body


def test_service_account_tokens_are_authenticated_and_rbac_enforced(
    kube_env: KubeEnv, kube_namespace: str
) -> None:
    # The operator runs as a service account in the chart: its Role must be what grants it.
    ns = kube_namespace
    kube_env.kubectl("create", "serviceaccount", "bot", "-n", ns)
    token = kube_env.kubectl("create", "token", "bot", "-n", ns).stdout.strip()

    def as_bot(*args: str) -> Any:
        return kube_env.kubectl("--token", token, "-n", ns, *args, check=False)

    who = as_bot("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
    assert who.stdout == f"system:serviceaccount:{ns}:bot"
    denied = as_bot("get", "configmaps")
    assert denied.returncode != 0 and "Forbidden" in denied.stderr

    kube_env.kubectl("create", "role", "read-cm", "-n", ns, "--verb=list", "--resource=configmaps")
    kube_env.kubectl(
        "create", "rolebinding", "bot-reads", "-n", ns, "--role=read-cm",
        f"--serviceaccount={ns}:bot",
    )
    deadline = time.monotonic() + 10
    while (allowed := as_bot("get", "configmaps")).returncode != 0:
        assert time.monotonic() < deadline, allowed.stderr
        time.sleep(0.2)
    kube_env.kubectl("create", "configmap", "keep", "-n", ns)
    assert "keep" in as_bot("get", "configmaps").stdout
    refused = as_bot("delete", "configmap", "keep")
    assert refused.returncode != 0 and "Forbidden" in refused.stderr
