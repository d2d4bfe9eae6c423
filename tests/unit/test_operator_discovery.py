"""The Node discovery loop against an in-memory API server: what it writes, keeps and deletes."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any

from ultraplane.operator.discovery import NodeDiscovery
from ultraplane.operator.kube import Gone

from tests.unit.test_operator_nodes import node

OWNED = {"ultraplane.dev/managed-by": "nodes", "ultraplane.dev/fleet": "f1"}


class FakeNodeKube:
    """Nodes and UltraServers; `apply` merges only the fields sent, like server-side apply."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}
        self.ultraservers: dict[str, dict[str, Any]] = {}
        self.writes: list[tuple[str, str]] = []
        self.fail = 0

    def list_nodes(self, label: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(n) for n in self.nodes.values()
                if label in n["metadata"]["labels"]]

    def list_owned_ultraservers(self, selector: str) -> list[dict[str, Any]]:
        wanted = dict(part.split("=") for part in selector.split(","))
        return [copy.deepcopy(u) for u in self.ultraservers.values()
                if wanted.items() <= u["metadata"].get("labels", {}).items()]

    def get_ultraserver(self, name: str) -> dict[str, Any]:
        if name not in self.ultraservers:
            raise Gone(name)
        return copy.deepcopy(self.ultraservers[name])

    def apply_ultraserver(self, body: Mapping[str, Any]) -> None:
        if self.fail:
            self.fail -= 1
            raise RuntimeError("API server unavailable")
        name = body["metadata"]["name"]
        obj = self.ultraservers.setdefault(name, {"metadata": {"name": name}, "spec": {}})
        obj["metadata"]["labels"] = {**obj["metadata"].get("labels", {}),
                                     **body["metadata"]["labels"]}
        obj["spec"].update(copy.deepcopy(body["spec"]))
        self.writes.append(("apply", name))

    def delete_ultraserver(self, name: str) -> None:
        self.writes.append(("delete", name))
        if self.ultraservers.pop(name, None) is None:
            raise Gone(name)


def run(kube: FakeNodeKube, steps: Any, **kwargs: Any) -> NodeDiscovery:
    """Starts discovery (sync, then the loop), runs `steps(d)` and lets the loop settle."""
    async def scenario() -> NodeDiscovery:
        d = NodeDiscovery(kube, fleet="f1", batch=0, retry=0.01, **kwargs)
        await d.sync()
        loop = asyncio.create_task(d.run())
        await asyncio.sleep(0.05)
        result = steps(d)
        if asyncio.iscoroutine(result):
            await result
        await asyncio.sleep(0.05)
        loop.cancel()
        return d

    return asyncio.run(scenario())


def add(kube: FakeNodeKube, *bodies: dict[str, Any]) -> None:
    for body in bodies:
        kube.nodes[body["metadata"]["name"]] = body


def test_nodes_become_owned_ultraservers_and_repeats_write_nothing() -> None:
    # us-a [a0][a1][a2][a3]   us-b [b0][b1][  ][  ]
    kube = FakeNodeKube()
    add(kube, *(node(f"a{i}", "us-a", index=i) for i in range(4)),
        *(node(f"b{i}", "us-b", index=i) for i in range(2)))

    async def steps(d: NodeDiscovery) -> None:
        for body in kube.nodes.values():  # the watch's first listing repeats what sync read
            d.observe_node(copy.deepcopy(body))

    run(kube, steps)
    assert sorted(kube.writes) == [("apply", "us-a"), ("apply", "us-b")]
    assert kube.ultraservers["us-a"]["metadata"]["labels"] == OWNED
    assert kube.ultraservers["us-a"]["spec"]["cordonedServers"] == []
    assert kube.ultraservers["us-b"]["spec"]["cordonedServers"] == [2, 3]
    assert kube.ultraservers["us-b"]["spec"]["network"] == ["nn-blk", "nn-mid", "nn-top"]


def test_cordon_updates_only_owned_fields_and_last_node_gone_deletes() -> None:
    # us-a [a0][a1][a2][a3]; an admin marked s00/c03 failed; a1 is cordoned, then all go.
    kube = FakeNodeKube()
    add(kube, *(node(f"a{i}", "us-a", index=i) for i in range(4)))

    async def steps(d: NodeDiscovery) -> None:
        kube.ultraservers["us-a"]["spec"]["failedChips"] = ["s00/c03"]
        d.observe_node(node("a1", "us-a", index=1, cordoned=True))
        await asyncio.sleep(0.05)
        assert kube.ultraservers["us-a"]["spec"]["cordonedServers"] == [1]
        assert kube.ultraservers["us-a"]["spec"]["failedChips"] == ["s00/c03"]
        for i in range(4):
            d.observe_node(node(f"a{i}", "us-a", index=i), deleted=True)

    run(kube, steps)
    assert kube.writes == [("apply", "us-a"), ("apply", "us-a"), ("delete", "us-a")]
    assert "us-a" not in kube.ultraservers


def test_relabelled_node_moves_between_ultraservers() -> None:
    kube = FakeNodeKube()
    add(kube, node("a0", "us-a", index=0), node("a1", "us-a", index=1), node("b0", "us-b"))

    def steps(d: NodeDiscovery) -> None:
        d.observe_node(node("a1", "us-b", index=1))

    run(kube, steps)
    assert kube.ultraservers["us-a"]["spec"]["cordonedServers"] == [1, 2, 3]
    assert kube.ultraservers["us-b"]["spec"]["cordonedServers"] == [2, 3]


def test_objects_it_does_not_own_are_left_alone() -> None:
    # us-a was written by an admin (no managed-by label); us-c belongs to another fleet.
    kube = FakeNodeKube()
    kube.ultraservers["us-a"] = {"metadata": {"name": "us-a", "labels": {}},
                                 "spec": {"profile": "trn3-gen2"}}
    kube.ultraservers["us-c"] = {"metadata": {"name": "us-c", "labels": {
        "ultraplane.dev/managed-by": "nodes", "ultraplane.dev/fleet": "other"}}, "spec": {}}
    add(kube, node("a0", "us-a"), node("c0", "us-c"))
    d = run(kube, lambda d: None)
    assert kube.writes == []
    assert kube.ultraservers["us-a"]["spec"] == {"profile": "trn3-gen2"}
    assert d.foreign == {"us-a", "us-c"}


def test_start_deletes_orphans_and_keeps_ultraservers_that_still_have_nodes() -> None:
    kube = FakeNodeKube()
    for name in ("us-gone", "us-kept"):
        kube.ultraservers[name] = {"metadata": {"name": name, "labels": dict(OWNED)},
                                   "spec": {"profile": "trn2", "network": ["nn-blk", "nn-mid",
                                                                           "nn-top"],
                                            "cordonedServers": []}}
    add(kube, *(node(f"k{i}", "us-kept", index=i) for i in range(4)))
    run(kube, lambda d: None)
    assert kube.writes == [("delete", "us-gone")]  # us-kept already matched: not rewritten
    assert set(kube.ultraservers) == {"us-kept"}


def test_a_failed_write_is_retried() -> None:
    kube = FakeNodeKube()
    kube.fail = 2
    add(kube, node("a0", "us-a"))
    run(kube, lambda d: None)
    assert kube.writes == [("apply", "us-a")] and "us-a" in kube.ultraservers


def test_unusable_nodes_are_reported_once_per_reason() -> None:
    kube = FakeNodeKube()
    add(kube, node("a0", "us-a", index=0), node("cpu", "us-a", instance="m5.large"))
    events: list[tuple[str, str, str]] = []

    def emit(body: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        events.append((body["metadata"]["name"], type_, reason))
        assert body["kind"] == "Node" and "us-a" in message

    def steps(d: NodeDiscovery) -> None:
        d.observe_node(node("a0", "us-a", index=0, cordoned=True))  # us-a rebuilt again

    run(kube, steps, emit=emit)
    assert events == [("cpu", "Warning", "NotAnUltraServerNode")]
    assert kube.ultraservers["us-a"]["spec"]["cordonedServers"] == [0, 1, 2, 3]


def test_a_standby_replica_writes_nothing_until_it_leads() -> None:
    kube = FakeNodeKube()
    add(kube, node("a0", "us-a"))

    async def steps(d: NodeDiscovery) -> None:
        d.set_leader(False)
        d.observe_node(node("a0", "us-a", cordoned=True))
        await asyncio.sleep(0.05)
        assert kube.writes == [("apply", "us-a")]  # from before it lost the lease
        await d.sync()  # on gaining the Lease, as handlers.startup does
        d.set_leader(True)

    run(kube, steps)
    assert kube.ultraservers["us-a"]["spec"]["cordonedServers"] == [0, 1, 2, 3]
