"""The Node discovery loop: keeps the UltraServers it owns equal to what the Nodes say.

The Nodes are those with Ultraplane's UltraServer label or the Neuron device plugin's
UltraServer ids (on EKS, with no label added by hand: `ultraplane/pods/nodelabels.py` holds the
table and its sources, `nodes.build` the mapping).

Why a loop of its own (off by default, `ultraplane operator --ultraservers-from-nodes`): Node
events are many and bursty (a rack powering up, a drain of forty nodes), so the kopf handler only
records the Node and marks its UltraServer dirty; this loop waits a short batch window and then
rebuilds each dirty UltraServer once through the pure `nodes.build`. It writes only when the
result differs from what it last wrote, with server-side apply of the fields it owns (profile,
network, cordonedServers) under its own field manager, so `spec.failedChips`, `schedulable` and
`drainPolicy` set by an admin are never touched, and indexes an admin added to cordonedServers
stay. It writes only objects labelled `ultraplane.dev/managed-by=nodes` (and the `--fleet` label
when set): an UltraServer of the same name written by someone else is left alone, with a
warning. The admission loop then sees these UltraServers through its usual watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ultraplane.operator.jobviews import FLEET_LABEL, GROUP, VERSION
from ultraplane.operator.kube import Gone
from ultraplane.operator.nodes import (
    DEFAULT_LABELS,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NodeLabels,
    Skip,
    build,
    ultraserver_name,
)

log = logging.getLogger("ultraplane.operator.nodes")
Emit = Callable[[Mapping[str, Any], str, str, str], None]
OWNED_FIELDS = ("profile", "network", "cordonedServers")


class NodeKube(Protocol):
    """The API calls of discovery."""

    def list_nodes(self, label: str) -> list[dict[str, Any]]: ...
    def list_owned_ultraservers(self, selector: str) -> list[dict[str, Any]]: ...
    def get_ultraserver(self, name: str) -> dict[str, Any]: ...
    def apply_ultraserver(self, body: Mapping[str, Any]) -> None: ...
    def delete_ultraserver(self, name: str) -> None: ...


def _name(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("name", ""))


class NodeDiscovery:
    """Node cache by UltraServer, the specs last written, and the loop that writes them."""

    def __init__(self, kube: NodeKube, *, labels: NodeLabels = DEFAULT_LABELS,
                 fleet: str | None = None, emit: Emit | None = None,
                 batch: float = 0.2, retry: float = 5.0) -> None:
        self.kube = kube
        self.labels = labels
        self.fleet = fleet
        self.emit = emit
        self.batch = batch
        self.retry = retry
        self.members: dict[str, dict[str, Mapping[str, Any]]] = {}  # UltraServer -> node -> body
        self.group_of: dict[str, str] = {}  # node -> UltraServer
        self.seen: set[str] = set()  # nodes known from watch events (newer than any listing)
        self.owned: dict[str, dict[str, Any]] = {}  # UltraServer -> owned spec fields written
        self.foreign: set[str] = set()
        self.skipped: dict[str, str] = {}  # node -> reason last reported
        self.dirty: set[str] = set()
        self.wake = asyncio.Event()
        self.ready = False
        self.leader = True

    @property
    def owner_labels(self) -> dict[str, str]:
        labels = {MANAGED_BY_LABEL: MANAGED_BY}
        if self.fleet:
            labels[FLEET_LABEL] = self.fleet
        return labels

    def _ours(self, body: Mapping[str, Any]) -> bool:
        labels = (body.get("metadata") or {}).get("labels") or {}
        return all(labels.get(k) == v for k, v in self.owner_labels.items())

    # -- the cache -----------------------------------------------------------------------
    def observe_node(self, body: Mapping[str, Any], *, deleted: bool = False,
                     listed: bool = False) -> None:
        node = _name(body)
        if listed and node in self.seen:
            return  # a watch event already told us something at least as new
        if not listed:
            self.seen.add(node)
        old = self.group_of.pop(node, None)
        if old is not None:
            group = self.members.get(old, {})
            group.pop(node, None)
            if not group:
                self.members.pop(old, None)
            self.dirty.add(old)
        new = None if deleted else ultraserver_name(body, self.labels)
        if new is not None:
            self.members.setdefault(new, {})[node] = {"apiVersion": "v1", "kind": "Node", **body}
            self.group_of[node] = new
            self.dirty.add(new)
        else:
            self.skipped.pop(node, None)
        self.wake.set()

    async def sync(self) -> None:
        """Lists the labelled Nodes and the owned UltraServers (start, or a gained Lease), so an
        UltraServer whose Nodes all went while the operator was down is deleted."""
        selector = ",".join(f"{k}={v}" for k, v in self.owner_labels.items())
        nodes: dict[str, dict[str, Any]] = {}
        for label in self.labels.selectors():  # ours, or the Neuron device plugin's ids
            for body in await asyncio.to_thread(self.kube.list_nodes, label):
                nodes[_name(body)] = body
        owned = await asyncio.to_thread(self.kube.list_owned_ultraservers, selector)
        for body in nodes.values():
            self.observe_node(body, listed=True)
        self.owned = {_name(us): {k: (us.get("spec") or {}).get(k) for k in OWNED_FIELDS}
                      for us in owned}
        self.foreign.clear()
        self.dirty |= set(self.owned)
        self.ready = True
        self.wake.set()

    def set_leader(self, leader: bool) -> None:
        """Only the Lease holder writes; a new holder writes what piled up meanwhile."""
        self.leader = leader
        self.wake.set()

    # -- the loop ------------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            if not (self.ready and self.leader):
                continue
            await asyncio.sleep(self.batch)
            if await self.reconcile():
                continue
            await asyncio.sleep(self.retry)  # some write failed: its UltraServer stays dirty
            self.wake.set()

    async def reconcile(self) -> bool:
        """Writes every dirty UltraServer; False when a write failed (it stays dirty)."""
        dirty, self.dirty = sorted(self.dirty), set()
        ok = True
        for name in dirty:
            try:
                await self._reconcile(name)
            except Exception as exc:  # the API server is down or refuses: retry later
                log.warning("UltraServer %s from Nodes not written (retrying): %s", name, exc)
                self.dirty.add(name)
                ok = False
        return ok

    async def _reconcile(self, name: str) -> None:
        bodies = list(self.members.get(name, {}).values())
        desired, skips = build(name, bodies, self.labels) if bodies else (None, [])
        self._report(name, bodies, skips)
        if desired is None:
            if name in self.owned:
                await asyncio.to_thread(self._delete, name)
                self.owned.pop(name, None)
                log.info("UltraServer %s deleted: no usable Node left", name)
            return
        if name not in self.owned:
            try:
                live: dict[str, Any] | None = await asyncio.to_thread(
                    self.kube.get_ultraserver, name)
            except Gone:
                live = None
            if live is not None and not self._ours(live):
                if name not in self.foreign:
                    log.warning("UltraServer %s exists and is not labelled %s: its Nodes are "
                                "not applied to it", name, self.owner_labels)
                self.foreign.add(name)
                return
            self.foreign.discard(name)
        spec = desired.spec()
        if self.owned.get(name) == spec:
            return
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "UltraServer",
                "metadata": {"name": name, "labels": self.owner_labels}, "spec": spec}
        await asyncio.to_thread(self.kube.apply_ultraserver, body)
        self.owned[name] = spec
        log.info("UltraServer %s from %d Node(s): profile %s, network %s, cordoned %s", name,
                 len(desired.nodes), desired.profile, desired.network, desired.cordoned_servers)

    def _delete(self, name: str) -> None:
        with contextlib.suppress(Gone):
            self.kube.delete_ultraserver(name)

    def _report(self, name: str, bodies: list[Mapping[str, Any]], skips: list[Skip]) -> None:
        """A warning (log line and Event on the Node) once per Node and reason."""
        reasons = {s.node: s.reason for s in skips}
        by_name = {_name(b): b for b in bodies}
        for node in by_name:
            reason = reasons.get(node)
            if reason is None:
                self.skipped.pop(node, None)
            elif self.skipped.get(node) != reason:
                self.skipped[node] = reason
                log.warning("Node %s left out of UltraServer %s: %s", node, name, reason)
                if self.emit is not None:
                    self.emit(by_name[node], "Warning", "NotAnUltraServerNode",
                              f"left out of UltraServer {name}: {reason}")
