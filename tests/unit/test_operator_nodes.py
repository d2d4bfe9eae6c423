"""Node labels -> UltraServer specs (`operator/nodes.py`), as tables of Nodes and the spec."""

from __future__ import annotations

from typing import Any

import pytest
from ultraplane.operator.nodes import (
    INSTANCE_PROFILES,
    NodeLabels,
    build,
    node_network,
    out_of_service,
    ultraserver_name,
)

from ultraplane.resources.ultraservers import UltraServerSpec

US = "ultraplane.dev/ultraserver"
IDX = "ultraplane.dev/server-index"
TYPE = "node.kubernetes.io/instance-type"


def node(name: str, us: str | None = "us-a", *, index: int | str | None = None,
         instance: str | None = "trn2u.48xlarge", profile: str | None = None,
         layers: dict[int, str] | None = None, cordoned: bool = False,
         ready: str | None = "True", **labels: str) -> dict[str, Any]:
    """A Node body the way the API server returns it (labels, spec.unschedulable, Ready)."""
    found: dict[str, str] = dict(labels)
    if us is not None:
        found[US] = us
    if index is not None:
        found[IDX] = str(index)
    if instance is not None:
        found[TYPE] = instance
    if profile is not None:
        found["ultraplane.dev/profile"] = profile
    for n, value in (layers if layers is not None else {1: "nn-top", 2: "nn-mid", 3: "nn-blk"}).items():
        found[f"topology.k8s.aws/network-node-layer-{n}"] = value
    conditions = [] if ready is None else [{"type": "Ready", "status": ready}]
    return {"metadata": {"name": name, "labels": found},
            "spec": {"unschedulable": True} if cordoned else {},
            "status": {"conditions": conditions}}


# Each case: the Nodes of UltraServer `us-a` and the spec discovery writes, or what it skips.
#
#   us-a (trn2: 4 servers x 16 chips)     index:  0    1    2    3
#   EFA network above it: nn-top > nn-mid > nn-blk   (layer 1 is the top)
CASES: list[tuple[str, list[dict[str, Any]], dict[str, Any] | None, set[str]]] = [
    (
        # [n0][n1][n2][n3]  all Ready, indexes from the label
        "four indexed nodes",
        [node(f"n{i}", index=i) for i in range(4)],
        {"profile": "trn2", "network": ["nn-blk", "nn-mid", "nn-top"], "cordonedServers": []},
        set(),
    ),
    (
        # [b ][c ][d ][a ]  no index label: node-name order gives 0..3
        "indexes from node names",
        [node("d"), node("b"), node("c"), node("a", index=3)],
        {"profile": "trn2", "network": ["nn-blk", "nn-mid", "nn-top"], "cordonedServers": []},
        set(),
    ),
    (
        # [n0][XX][n2][  ]  n1 cordoned, index 3 has no Node
        "cordoned node and missing server",
        [node("n0", index=0), node("n1", index=1, cordoned=True), node("n2", index=2)],
        {"profile": "trn2", "network": ["nn-blk", "nn-mid", "nn-top"], "cordonedServers": [1, 3]},
        set(),
    ),
    (
        # [n0][n1][NR][??]  n2 NotReady, n3 never reported Ready
        "not ready nodes are cordoned",
        [node("n0", index=0), node("n1", index=1), node("n2", index=2, ready="False"),
         node("n3", index=3, ready=None)],
        {"profile": "trn2", "network": ["nn-blk", "nn-mid", "nn-top"], "cordonedServers": [2, 3]},
        set(),
    ),
    (
        # the profile label wins over the instance type; 2 of 4 Trn3 Gen1 servers present
        "profile label",
        [node("n0", index=0, instance="m5.large", profile="trn3-gen1"),
         node("n1", index=1, instance=None, profile="trn3-gen1")],
        {"profile": "trn3-gen1", "network": ["nn-blk", "nn-mid", "nn-top"],
         "cordonedServers": [2, 3]},
        set(),
    ),
    (
        # an unknown instance type is skipped; the other three still make the UltraServer
        "unknown instance type skipped",
        [node("n0", index=0), node("n1", index=1), node("n2", index=2),
         node("cpu", index=3, instance="m5.large")],
        {"profile": "trn2", "network": ["nn-blk", "nn-mid", "nn-top"], "cordonedServers": [3]},
        {"cpu"},
    ),
    (
        "no node with a known profile",
        [node("cpu", instance="m5.large"), node("bad", profile="trn9")],
        None,
        {"cpu", "bad"},
    ),
    (
        # the minority profile, a duplicate index (the first Node by name keeps it), an index
        # beyond the profile, an index that is not a number
        "conflicting nodes skipped",
        [node("n0", index=0), node("n1", index=1), node("g1", index=2, profile="trn3-gen1"),
         node("z-dup", index=1), node("far", index=4), node("txt", index="x")],
        {"profile": "trn2", "network": ["nn-blk", "nn-mid", "nn-top"], "cordonedServers": [2, 3]},
        {"g1", "z-dup", "far", "txt"},
    ),
    (
        # five unindexed Nodes for four servers: the last by name is left out
        "more nodes than servers",
        [node(f"n{i}") for i in range(5)],
        {"profile": "trn2", "network": ["nn-blk", "nn-mid", "nn-top"], "cordonedServers": []},
        {"n4"},
    ),
    (
        # the network most Nodes report wins (n0 sits under a different block)
        "most common network",
        [node("n0", index=0, layers={1: "nn-top", 2: "nn-mid", 3: "other"}),
         node("n1", index=1), node("n2", index=2), node("n3", index=3)],
        {"profile": "trn2", "network": ["nn-blk", "nn-mid", "nn-top"], "cordonedServers": []},
        set(),
    ),
    (
        # a tie: the Node with the lowest server index decides; no layer labels at all is []
        "network tie and no layers",
        [node("n0", index=0, layers={}), node("n1", index=1, layers={1: "x"})],
        {"profile": "trn2", "network": [], "cordonedServers": [2, 3]},
        set(),
    ),
    (
        # all four layers: layer 4 is nearest
        "four layers nearest first",
        [node("n0", index=0, layers={1: "l1", 2: "l2", 3: "l3", 4: "l4"})],
        {"profile": "trn2", "network": ["l4", "l3", "l2", "l1"], "cordonedServers": [1, 2, 3]},
        set(),
    ),
]


@pytest.mark.parametrize(("nodes", "spec", "skipped"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_nodes_make_the_ultraserver_spec(nodes: list[dict[str, Any]], spec: dict[str, Any] | None,
                                         skipped: set[str]) -> None:
    found, skips = build("us-a", nodes)
    assert (found.spec() if found else None) == spec
    assert {s.node for s in skips} == skipped
    assert all(s.reason for s in skips)
    if found is not None:  # what discovery writes passes the CRD's own model
        UltraServerSpec.model_validate(found.spec())


def test_server_index_map_names_each_node() -> None:
    found, _ = build("us-a", [node("d"), node("b"), node("x", index=0)])
    assert found is not None and dict(found.nodes) == {0: "x", 1: "b", 2: "d"}


def test_ids_become_object_names_and_invalid_ones_are_skipped() -> None:
    assert ultraserver_name(node("n", us="US_Cap-7"), NodeLabels()) == "us-cap-7"
    assert ultraserver_name(node("n", us=None), NodeLabels()) is None
    found, skips = build("bad!", [node("n0")])
    assert found is None and [s.node for s in skips] == ["n0"]


def test_labels_are_configurable() -> None:
    labels = NodeLabels(ultraserver="example.com/us", server_index="example.com/slot")
    body = node("n0", us=None, **{"example.com/us": "pod-1", "example.com/slot": "2"})
    assert ultraserver_name(body, labels) == "pod-1"
    found, _ = build("pod-1", [body], labels)
    assert found is not None and dict(found.nodes) == {2: "n0"}


def test_readiness_and_network_helpers() -> None:
    assert not out_of_service(node("n"))
    assert out_of_service(node("n", cordoned=True))
    assert out_of_service(node("n", ready="Unknown"))
    deleting = node("n")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert out_of_service(deleting)
    assert node_network(node("n", layers={2: "b", 4: "d"})) == ("d", "b")


def test_instance_types_map_to_shipped_profiles() -> None:
    assert INSTANCE_PROFILES["trn2u.48xlarge"] == "trn2"
    for instance in INSTANCE_PROFILES:
        found, skips = build("us-a", [node("n0", instance=instance)])
        assert found is not None and not skips
