"""Zero-label adoption on kind: the workers labelled exactly as EKS labels a Trn2 UltraServer
node group (`tests/eksnodes.py`: the Neuron device plugin's UltraServer labels, the instance
type `trn2u.48xlarge`, EKS's network layers) and nothing of Ultraplane's own; the operator,
deployed by the chart with `operator.ultraserversFromNodes`, builds the UltraServer from them.

The step leaves the cluster as it found it: every label it adds or removes is put back, the
chart value it turns on is turned off again if it was off, and it waits until the UltraServer
it caused is gone, so no later e2e test depends on it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import NAMESPACE, RELEASE
from tests.e2e.kinds import Kind, wait_until
from tests.eksnodes import EKS_KEYS, SERVER_ID, US_A

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

OURS = "ultraplane.dev/"


def _touched(labels: dict[str, str]) -> dict[str, str]:
    """The labels this step may change: EKS's keys and Ultraplane's own."""
    return {k: v for k, v in labels.items() if k in EKS_KEYS or k.startswith(OURS)}


def _relabel(kind: Kind, node: str, before: dict[str, str], after: dict[str, str]) -> None:
    """`kubectl label` that turns the touched labels `before` into `after`."""
    removed = [f"{k}-" for k in before if k not in after]
    changed = [f"{k}={v}" for k, v in after.items() if before.get(k) != v]
    if removed or changed:
        kind.kc("label", "node", node, "--overwrite", *changed, *removed)


def _labels(kind: Kind, node: str) -> dict[str, str]:
    return dict(kind.get("node", node)["metadata"].get("labels") or {})


def _from_nodes_on(kind: Kind) -> bool:
    values = json.loads(kind.helm_run("get", "values", RELEASE, "--namespace", NAMESPACE,
                                      "--all", "-o", "json"))
    return bool((values.get("operator") or {}).get("ultraserversFromNodes"))


def _set_from_nodes(kind: Kind, on: bool) -> None:
    kind.helm_run("upgrade", RELEASE, "helm/ultraplane", "--namespace", NAMESPACE,
                  "--reuse-values", "--set", f"operator.ultraserversFromNodes={str(on).lower()}",
                  "--wait", "--timeout", "10m", timeout=900)


@pytest.fixture
def eks_workers(release: Kind) -> Iterator[dict[str, int]]:
    """The first two workers as node-id-4 1 and 0 of US_A (the reverse of their name order),
    with EKS's labels only; everything restored afterwards."""
    names = sorted(n["metadata"]["name"] for n in release.items("nodes")
                   if "node-role.kubernetes.io/control-plane" not in n["metadata"].get("labels", {}))
    assert len(names) >= 2, names
    workers = {names[0]: 1, names[1]: 0}
    saved = {node: _touched(_labels(release, node)) for node in workers}
    was_on = _from_nodes_on(release)
    try:
        for node, node_id in workers.items():
            _relabel(release, node, saved[node], US_A.labels(node_id))
            release.kc("uncordon", node)
        if not was_on:
            _set_from_nodes(release, True)
        yield workers
    finally:
        for node in workers:
            _relabel(release, node, _touched(_labels(release, node)), saved[node])
        # discovery (still on) deletes what only these labels made, before it may go off
        wait_until(f"UltraServer {US_A.server_id_4} deleted after the labels went back",
                   lambda: US_A.server_id_4 not in _names(release), timeout=180)
        if not was_on:
            _set_from_nodes(release, False)
        for node in workers:
            assert _touched(_labels(release, node)) == saved[node]


def _names(kind: Kind) -> set[str]:
    return {u["metadata"]["name"] for u in kind.items("ultraservers")}


def _ultraserver(kind: Kind, name: str) -> dict[str, Any] | None:
    return next((u for u in kind.items("ultraservers") if u["metadata"]["name"] == name), None)


def test_workers_labelled_as_eks_does_become_an_ultraserver(release: Kind,
                                                            eks_workers: dict[str, int]) -> None:
    # US_A (trn2: 4 servers x 16 chips)  [w1:0][w0:1][ -- ][ -- ]
    #   layer-3 nn-9f2b.. > layer-2 nn-1d7a.. > layer-1 nn-e504..
    for node in eks_workers:
        assert not any(k.startswith(OURS) for k in _labels(release, node))
    us = wait_until(f"UltraServer {US_A.server_id_4} built from EKS's labels",
                    lambda: _ultraserver(release, US_A.server_id_4), timeout=180)
    assert us["metadata"]["labels"]["ultraplane.dev/managed-by"] == "nodes"
    assert us["spec"]["profile"] == "trn2"
    assert us["spec"]["network"] == US_A.network
    # node-id-4 0 and 1 have Nodes; the other two servers of the UltraServer do not
    assert us["spec"]["cordonedServers"] == [2, 3]
    # grouped by server-id-4: no UltraServer per server-id-2 pair
    assert not _names(release) & {US_A.pairs[0], US_A.pairs[1]}
    worker_labels = [_labels(release, node) for node in eks_workers]
    assert {labels[SERVER_ID.format(4)] for labels in worker_labels} == {US_A.server_id_4}
