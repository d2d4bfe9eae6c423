"""EKS's own Node labels -> UltraServers, with no label added by hand (`ultraplane/pods/nodelabels.py`).

Every Node here carries exactly what a Trn2 UltraServer node group on EKS carries
(`tests/eksnodes.py`); Ultraplane's `ultraplane.dev/*` labels appear only where a case says
they override.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from ultraplane.operator.discovery import NodeDiscovery
from ultraplane.operator.nodes import build, ultraserver_name

from tests.eksnodes import MODE, NODE_ID, SERVER_ID, US_A, US_B, EksUltraServer
from tests.unit.test_operator_discovery import FakeNodeKube
from ultraplane.pods import nodelabels
from ultraplane.pods.neurondevices import devices_for_node
from ultraplane.pods.nodelabels import NodeLabels, membership


def eks_node(name: str, labels: dict[str, str], *, ready: bool = True) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def group(us: EksUltraServer, names: list[str], **kw: Any) -> list[dict[str, Any]]:
    """Nodes `names[i]` with node-id-4 = i (names chosen so that name order is NOT id order)."""
    return [eks_node(n, us.labels(i, **kw)) for i, n in enumerate(names)]


# US_A: four trn2u.48xlarge, node-id-4 0..3 on nodes named so their name order is 3,2,1,0
#
#   server-id-4 bog79p1y8tetj5uu   [ip-d:0][ip-c:1][ip-b:2][ip-a:3]
#   server-id-2                    [u5wy..  pair  ][ygml..  pair  ]
#   layer-3 nn-9f2b.. > layer-2 nn-1d7a.. > layer-1 nn-e504..  (layer 1 the broadest)
NAMES_A = ["ip-d", "ip-c", "ip-b", "ip-a"]


def test_a_node_group_becomes_one_ultraserver_by_server_id_4_and_node_id_4() -> None:
    built, skips = build(US_A.server_id_4, group(US_A, NAMES_A))
    assert skips == []
    assert built is not None
    assert built.spec() == {"profile": "trn2", "network": US_A.network, "cordonedServers": []}
    assert built.nodes == {0: "ip-d", 1: "ip-c", 2: "ip-b", 3: "ip-a"}  # node-id, not names


def test_each_node_is_named_after_its_ultraservers_id() -> None:
    names = {ultraserver_name(n, NodeLabels()) for n in group(US_A, NAMES_A) + group(US_B, NAMES_A)}
    assert names == {US_A.server_id_4, US_B.server_id_4}


def test_mode_2_groups_by_server_id_2_and_cordons_the_missing_half() -> None:
    # [p0:0][p1:1][ -- ][ -- ]   mode "2": this pair works as a 2-node config of its own
    nodes = [eks_node(f"p{i}", US_A.labels(i, mode="2")) for i in range(2)]
    assert {ultraserver_name(n, NodeLabels()) for n in nodes} == {US_A.pairs[0]}
    built, _ = build(US_A.pairs[0], nodes)
    assert built is not None
    assert built.nodes == {0: "p0", 1: "p1"}
    assert built.cordoned_servers == (2, 3)


def test_our_labels_override_the_aws_ones() -> None:
    # ultraplane.dev/ultraserver renames the group; ultraplane.dev/server-index moves one node
    nodes = group(US_A, NAMES_A)
    for n in nodes:
        n["metadata"]["labels"]["ultraplane.dev/ultraserver"] = "rack7-us1"
    nodes[0]["metadata"]["labels"]["ultraplane.dev/server-index"] = "3"  # node-id-4 says 0
    nodes[3]["metadata"]["labels"]["ultraplane.dev/server-index"] = "0"  # node-id-4 says 3
    assert {ultraserver_name(n, NodeLabels()) for n in nodes} == {"rack7-us1"}
    built, _ = build("rack7-us1", nodes)
    assert built is not None
    # our id label takes the node out of Neuron's numbering: unindexed ones fill by name
    assert built.nodes == {0: "ip-a", 1: "ip-b", 2: "ip-c", 3: "ip-d"}


def test_our_server_index_overrides_node_id_under_the_neuron_id() -> None:
    nodes = group(US_A, NAMES_A)
    nodes[0]["metadata"]["labels"]["ultraplane.dev/server-index"] = "3"
    nodes[3]["metadata"]["labels"]["ultraplane.dev/server-index"] = "0"
    built, _ = build(US_A.server_id_4, nodes)
    assert built is not None
    assert built.nodes == {0: "ip-a", 1: "ip-c", 2: "ip-b", 3: "ip-d"}


@pytest.mark.parametrize(("change", "expected"), [
    ({}, ("bog79p1y8tetj5uu", "2")),
    ({MODE: "2"}, ("ygml2651y0lwdd46", "0")),  # no 4-node config: the pair is the group
    ({MODE: "3"}, ("ygml2651y0lwdd46", "0")),  # the driver's other 2-node mode number
    ({MODE: "4"}, ("bog79p1y8tetj5uu", "2")),  # 4 nodes, counted
    ({MODE: "1"}, ("bog79p1y8tetj5uu", "2")),  # 4 nodes, in the driver's numbering
    ({SERVER_ID.format(4): "0000000000000000",
      SERVER_ID.format(2): "0000000000000000"}, None),  # stand-alone: the driver's "none" ids
    ({MODE: "x4"}, ("bog79p1y8tetj5uu", "2")),  # not numbers: the id labels decide
    ({SERVER_ID.format(4): "0000000000000000"}, ("ygml2651y0lwdd46", "0")),  # driver's "none"
    ({NODE_ID.format(4): "-1"}, ("bog79p1y8tetj5uu", None)),  # no index: filled by name
])
def test_membership_of_one_node(change: dict[str, str], expected: tuple[str, str | None] | None,
                                ) -> None:
    labels = {**US_A.labels(2), **change}
    found = membership(labels)
    assert (None if found is None else (found.ultraserver, found.index)) == expected


def test_neuron_labels_can_be_switched_off() -> None:
    assert membership(US_A.labels(0), NodeLabels(neuron=False)) is None
    assert NodeLabels(neuron=False).selectors() == ("ultraplane.dev/ultraserver",)
    assert set(NodeLabels().selectors()) == {"ultraplane.dev/ultraserver",
                                             SERVER_ID.format(4), SERVER_ID.format(2)}


def test_the_network_is_read_nearest_first() -> None:
    assert list(nodelabels.network(US_A.labels(0))) == US_A.network


def test_the_fake_device_plugin_advertises_an_eks_node_s_chips() -> None:
    devices = devices_for_node("ip-a", US_A.labels(3))
    assert devices.count == 16
    assert US_A.server_id_4 in devices.reason


def test_discovery_lists_nodes_by_the_neuron_ids_and_writes_each_ultraserver() -> None:
    kube = FakeNodeKube()
    for body in group(US_A, NAMES_A) + group(US_B, ["ip-h", "ip-g", "ip-f", "ip-e"]):
        kube.nodes[body["metadata"]["name"]] = body
    kube.nodes["cpu-1"] = eks_node("cpu-1", {"node.kubernetes.io/instance-type": "m7i.large"})

    async def scenario() -> None:
        d = NodeDiscovery(kube, fleet="f1", batch=0, retry=0.01)
        await d.sync()
        assert await d.reconcile()

    asyncio.run(scenario())
    assert sorted(kube.ultraservers) == sorted([US_A.server_id_4, US_B.server_id_4])
    for us in (US_A, US_B):
        assert kube.ultraservers[us.server_id_4]["spec"] == {
            "profile": "trn2", "network": us.network, "cordonedServers": []}
