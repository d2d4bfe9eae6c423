"""Zero-label adoption on a real API server: Nodes labelled exactly as EKS labels a Trn2
UltraServer node group become UltraServers, with no `ultraplane.dev/*` label on any Node.

The Nodes carry only what AWS puts there (`tests/eksnodes.py`: the Neuron device plugin's
`ultraserver-mode`, `server-id-4/-2`, `node-id-4/-2`, the instance type `trn2u.48xlarge`, EKS's
`network-node-layer-1..3`), with fresh random UltraServer ids so no other test's objects share
their names. The operator runs with `--kubeconfig` and `KUBECONFIG` pointing nowhere, so its
own client and kopf's watches both prove the flag is what they follow.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.eksnodes import EksUltraServer
from tests.integration.operator_harness import Harness


def fresh_ultraserver(layer3: str) -> EksUltraServer:
    """An UltraServer with new random ids, in AWS's shape (16 lowercase characters)."""
    def ident() -> str:
        return secrets.token_hex(8)

    return EksUltraServer(ident(), (ident(), ident()),
                          ("nn-e50490a237cb0f01a", "nn-1d7ac0f4e0a1b2c3d", layer3))


class EksNodes:
    """Node objects created with EKS's labels only; deleted after the test."""

    def __init__(self, kube_env: Any) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(kube_env.api_client())
        self.names: list[str] = []

    def create(self, name: str, labels: dict[str, str]) -> None:
        self.core.create_node({"apiVersion": "v1", "kind": "Node",
                               "metadata": {"name": name, "labels": labels}})
        self.names.append(name)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.core.patch_node_status(name, {"status": {"conditions": [{
            "type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "set by the test", "lastHeartbeatTime": now,
            "lastTransitionTime": now}]}})

    def delete_all(self) -> None:
        from kubernetes.client import ApiException

        for name in self.names:
            try:
                self.core.delete_node(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise


@pytest.fixture
def eks_nodes(kube_env: Any) -> Iterator[EksNodes]:
    nodes = EksNodes(kube_env)
    try:
        yield nodes
    finally:
        nodes.delete_all()


class KubeconfigOnlyByFlag:
    """The tier's environment with KUBECONFIG pointing at no file (everything else passed on)."""

    def __init__(self, env: Any) -> None:
        self._env = env

    def env(self) -> dict[str, str]:
        return {**self._env.env(), "KUBECONFIG": "/nonexistent/kubeconfig"}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


def test_an_eks_node_group_becomes_ultraservers_with_no_hand_labels(
    op: Harness, eks_nodes: EksNodes, kube_env: Any
) -> None:
    # us_a  [ip-a-3:0][ip-a-2:1][ip-a-1:2][ip-a-0:3]   node-id-4 against name order
    # us_b  [ip-b-0:0][ip-b-1:1][ip-b-2:2][ip-b-3:3]
    #       both under layer-1 nn-e504.. > layer-2 nn-1d7a..; each its own layer-3
    us_a, us_b = fresh_ultraserver("nn-0000000000000000a"), fresh_ultraserver("nn-0000000000000000b")
    a_nodes = {f"{op.ns}-ip-a-{3 - i}": i for i in range(4)}
    for name, node_id in a_nodes.items():
        eks_nodes.create(name, us_a.labels(node_id))
    for i in range(4):
        eks_nodes.create(f"{op.ns}-ip-b-{i}", us_b.labels(i))
    for name in eks_nodes.names:
        labels = eks_nodes.core.read_node(name).metadata.labels
        assert not any(k.startswith("ultraplane.dev/") for k in labels)

    op.env = KubeconfigOnlyByFlag(op.env)
    op.start("--ultraservers-from-nodes", "--kubeconfig", str(kube_env.kubeconfig))
    for us in (us_a, us_b):
        got = op.wait(f"UltraServer {us.server_id_4}", lambda us=us: op.get_ultraserver(
            us.server_id_4), timeout=60)
        assert got["metadata"]["labels"] == {"ultraplane.dev/managed-by": "nodes",
                                             "ultraplane.dev/fleet": op.ns}
        assert got["spec"]["profile"] == "trn2"
        assert got["spec"]["network"] == us.network
        assert got["spec"]["cordonedServers"] == []
    fleet = op.api.list_cluster_custom_object("ultraplane.dev", "v1alpha1", "ultraservers",
                                              label_selector=f"ultraplane.dev/fleet={op.ns}")
    # one UltraServer per server-id-4, none per server-id-2 pair
    assert sorted(u["metadata"]["name"] for u in fleet["items"]) == sorted(
        [us_a.server_id_4, us_b.server_id_4])

    # A whole-UltraServer job (4 x 16 chips) lands on one of them, every server of it.
    op.job("train", 64, profile="trn2")
    alloc = op.phase("train", "Admitted", timeout=60)["status"]["allocation"]
    assert len(alloc["ultraServers"]) == 1
    assert alloc["ultraServers"][0] in (us_a.server_id_4, us_b.server_id_4)
    assert len(set(alloc["chips"])) == 64
