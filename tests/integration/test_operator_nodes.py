"""`--ultraservers-from-nodes` on a real API server: Nodes in, owned UltraServers out.

The tier has no kubelets, so the Nodes are created through the API (name, labels,
spec.unschedulable) and their Ready condition is written to the status subresource, the way a
kubelet would. The operator runs with `--fleet <namespace>`, so the UltraServers it derives carry
that fleet label and no other test's operator sees them; the Nodes are deleted afterwards (the
API server is shared by the whole session).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.integration.operator_harness import Harness

US_LABEL = "ultraplane.dev/ultraserver"
LAYERS = {1: "nn-top", 2: "nn-spine-3", 3: "nn-block-17"}


class Nodes:
    """Node objects of this test, through CoreV1Api."""

    def __init__(self, kube_env: Any) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(kube_env.api_client())
        self.names: list[str] = []

    def create(self, name: str, ultraserver: str, index: int | None = None) -> None:
        labels = {US_LABEL: ultraserver, "node.kubernetes.io/instance-type": "trn2u.48xlarge",
                  **{f"topology.k8s.aws/network-node-layer-{n}": v for n, v in LAYERS.items()}}
        if index is not None:
            labels["ultraplane.dev/server-index"] = str(index)
        self.core.create_node({"apiVersion": "v1", "kind": "Node",
                               "metadata": {"name": name, "labels": labels}})
        self.names.append(name)
        self.ready(name, True)

    def ready(self, name: str, ready: bool) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        condition = {"type": "Ready", "status": "True" if ready else "False",
                     "reason": "KubeletReady" if ready else "KubeletNotReady",
                     "message": "set by the test", "lastHeartbeatTime": now,
                     "lastTransitionTime": now}
        self.core.patch_node_status(name, {"status": {"conditions": [condition]}})

    def cordon(self, name: str) -> None:
        self.core.patch_node(name, {"spec": {"unschedulable": True}})

    def delete(self, name: str) -> None:
        from kubernetes.client import ApiException

        try:
            self.core.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture
def nodes(kube_env: Any) -> Iterator[Nodes]:
    n = Nodes(kube_env)
    try:
        yield n
    finally:
        for name in n.names:
            n.delete(name)


def test_ultraservers_follow_the_nodes(op: Harness, nodes: Nodes) -> None:
    # us-a [a0][a1][a2][a3]  (server-index labels)    us-b [b0][b1][b2][b3]  (by node name)
    #      above both: nn-block-17 < nn-spine-3 < nn-top  (layer 3 nearest)
    a, b = f"{op.ns}-a", f"{op.ns}-b"
    for i in range(4):
        nodes.create(f"{a}-n{3 - i}", a, index=3 - i)
        nodes.create(f"{b}-n{i}", b)
    op.start("--ultraservers-from-nodes")

    def spec_of(name: str) -> dict[str, Any]:
        return dict(op.get_ultraserver(name)["spec"])

    for name in (a, b):
        op.wait(f"UltraServer {name}", lambda name=name: op.get_ultraserver(name))
        got = op.get_ultraserver(name)
        assert got["metadata"]["labels"] == {"ultraplane.dev/managed-by": "nodes",
                                             "ultraplane.dev/fleet": op.ns}
        assert got["spec"]["profile"] == "trn2"
        assert got["spec"]["network"] == ["nn-block-17", "nn-spine-3", "nn-top"]
        assert got["spec"]["cordonedServers"] == []

    # An admin marks a chip failed; a cordon and a NotReady Node update only cordonedServers.
    op.patch_ultraserver(a, {"failedChips": ["s00/c00"]})
    nodes.cordon(f"{a}-n1")
    nodes.ready(f"{b}-n3", False)
    op.wait("a1 cordoned", lambda: spec_of(a)["cordonedServers"] == [1])
    op.wait("b3 cordoned", lambda: spec_of(b)["cordonedServers"] == [3])
    assert spec_of(a)["failedChips"] == ["s00/c00"]

    # Every Node of us-b goes: its UltraServer goes with them.
    for i in range(4):
        nodes.delete(f"{b}-n{i}")

    def b_gone() -> bool:
        from kubernetes.client import ApiException

        try:
            op.get_ultraserver(b)
        except ApiException as exc:
            return exc.status == 404
        return False

    op.wait("us-b deleted", b_gone)
    assert spec_of(a)["cordonedServers"] == [1]

    # A 16-chip job lands on the discovered us-a, off the cordoned server and the failed chip.
    op.job("train", 16, profile="trn2")
    alloc = op.phase("train", "Admitted")["status"]["allocation"]
    assert alloc["ultraServers"] == [a] and len(set(alloc["chips"])) == 16
    assert not any(c.startswith(f"{a}/s01/") for c in alloc["chips"])
    assert f"{a}/s00/c00" not in alloc["chips"]

    # A Node of us-a goes: its index is cordoned; the job keeps its chips (drainPolicy Wait).
    nodes.delete(f"{a}-n2")
    op.wait("a2 missing -> cordoned", lambda: spec_of(a)["cordonedServers"] == [1, 2])
    assert op.get("train")["status"]["phase"] == "Admitted"


def test_restart_deletes_orphans_and_never_touches_foreign_ultraservers(
    op: Harness, nodes: Nodes
) -> None:
    # us-a [a0][a1][a2][a3]  discovered; us-x written by an admin, with Nodes naming it too.
    a, x = f"{op.ns}-a", f"{op.ns}-x"
    for i in range(4):
        nodes.create(f"{a}-n{i}", a, index=i)
    nodes.create(f"{x}-n0", x)
    op.ultraserver(x, profile="trn3-gen2", network=["block-000"])
    op.start("--ultraservers-from-nodes")
    op.wait("us-a discovered", lambda: op.get_ultraserver(a))
    op.stop()
    for i in range(4):  # its Nodes go while no operator runs
        nodes.delete(f"{a}-n{i}")
    op.start("--ultraservers-from-nodes")
    op.wait("the orphaned us-a deleted", lambda: a not in {
        u["metadata"]["name"] for u in op.api.list_cluster_custom_object(
            "ultraplane.dev", "v1alpha1", "ultraservers",
            label_selector=f"ultraplane.dev/fleet={op.ns}")["items"]})
    foreign = op.get_ultraserver(x)
    assert foreign["spec"]["profile"] == "trn3-gen2" and foreign["spec"]["network"] == ["block-000"]
    assert "ultraplane.dev/managed-by" not in foreign["metadata"]["labels"]
    # us-x and us-a are reconciled in no particular order: the warning may trail the delete.
    op.wait("the foreign-UltraServer warning", lambda: "is not labelled" in (
        op.logdir / f"operator-{op.ns}-2.log").read_text())
