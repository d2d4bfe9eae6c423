"""UltraServers from Node labels: the pure mapping from Node bodies to UltraServer specs.

Why pure and separate: on a cluster with real Trainium nodes the fleet is already described by
the Nodes (EKS groups them by UltraServer id and labels the EFA network above each one), so the
operator can derive its `UltraServer` objects instead of an admin writing them. The rules (which
label wins, what a cordoned or NotReady node means, what happens to a missing server) are the
part worth testing with tables, so they live here with no API client; `discovery.py` feeds this
module from the Node watch and writes what it returns.

The label table and its sources are the core's (`ultraplane/pods/nodelabels.py`), shared with
the pod plane and the simulator's fake device plugin. The mapping, per UltraServer id (the
`NodeLabels.ultraserver` label, else the Neuron device plugin's
`neuron.amazonaws.com/ultraserver-server-id-4` or `-2`, see `nodelabels.membership`):
  - each Node is one server; its index is the `NodeLabels.server_index` label, else the
    Neuron `ultraserver-node-id-N` beside the id it was grouped by, or else the Nodes without
    one fill the free indexes in node-name order;
  - the profile is the `NodeLabels.profile` label, else the instance type through
    `INSTANCE_PROFILES`; the group takes the most common one and skips Nodes that disagree;
  - `spec.network` is the `topology.k8s.aws/network-node-layer-N` values, highest N first
    (layer 1 is the top of the EFA network, the UltraServer's spec lists nearest first), the
    most common tuple of the group (ties: the lowest server index);
  - a cordoned Node (`spec.unschedulable`), a Node whose `Ready` condition is not `True` (or
    absent: never reported) and every index without a Node go to `spec.cordonedServers`, so the
    allocator never places there.
A Node that cannot be mapped is skipped with a `Skip` naming it and why, never an exception.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ultraplane.hardware.profiles import UnknownProfileError, load_profile
from ultraplane.pods.nodelabels import DEFAULT_LABELS as DEFAULT_LABELS
from ultraplane.pods.nodelabels import INSTANCE_PROFILES as INSTANCE_PROFILES
from ultraplane.pods.nodelabels import INSTANCE_TYPE_LABEL as INSTANCE_TYPE_LABEL
from ultraplane.pods.nodelabels import NETWORK_LAYER_LABEL as NETWORK_LAYER_LABEL
from ultraplane.pods.nodelabels import NETWORK_LAYERS as NETWORK_LAYERS
from ultraplane.pods.nodelabels import NodeLabels as NodeLabels
from ultraplane.pods.nodelabels import labelled_profile, membership, network

MANAGED_BY_LABEL = "ultraplane.dev/managed-by"
MANAGED_BY = "nodes"

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")

Body = Mapping[str, Any]


@dataclass(frozen=True)
class Skip:
    """A Node left out of its UltraServer, and the sentence saying why."""

    node: str
    reason: str


@dataclass(frozen=True)
class DiscoveredUltraServer:
    """What the Nodes of one UltraServer id say about it."""

    name: str
    profile: str
    network: tuple[str, ...]
    cordoned_servers: tuple[int, ...]
    nodes: Mapping[int, str] = field(default_factory=dict)  # server index -> node name

    def spec(self) -> dict[str, Any]:
        """The spec fields discovery owns (never failedChips, schedulable or drainPolicy)."""
        return {"profile": self.profile, "network": list(self.network),
                "cordonedServers": list(self.cordoned_servers)}


def _name(body: Body) -> str:
    return str((body.get("metadata") or {}).get("name", ""))


def _labels(body: Body) -> Mapping[str, str]:
    return (body.get("metadata") or {}).get("labels") or {}


def ultraserver_name(body: Body, labels: NodeLabels) -> str | None:
    """The UltraServer object name for a Node: its id (`nodelabels.membership`) lowercased, `_`
    as `-`; None when the Node has no id. May be an invalid name (`build` then skips it)."""
    found = membership(_labels(body), labels)
    if found is None:
        return None
    return found.ultraserver.strip().lower().replace("_", "-")


def valid_name(name: str) -> bool:
    return bool(_NAME.match(name))


def node_profile(body: Body, labels: NodeLabels) -> str | None:
    """The Node's profile: the profile label, else its instance type's; None when unknown."""
    return labelled_profile(_labels(body), labels)


def node_network(body: Body) -> tuple[str, ...]:
    """The EFA network groups above the Node, nearest first (highest layer number first)."""
    return network(_labels(body))


def out_of_service(body: Body) -> bool:
    """Cordoned (`spec.unschedulable`), or not Ready: a Ready condition that is not `True`, or
    none at all (a kubelet that never reported)."""
    if (body.get("spec") or {}).get("unschedulable"):
        return True
    if (body.get("metadata") or {}).get("deletionTimestamp"):
        return True
    conditions = (body.get("status") or {}).get("conditions") or []
    ready = [c for c in conditions if isinstance(c, Mapping) and c.get("type") == "Ready"]
    return not ready or ready[-1].get("status") != "True"


def _servers(profile: str) -> int | None:
    try:
        return load_profile(profile).servers_per_ultraserver
    except UnknownProfileError:
        return None


def build(name: str, bodies: Iterable[Body],
          labels: NodeLabels = DEFAULT_LABELS) -> tuple[DiscoveredUltraServer | None, list[Skip]]:
    """The UltraServer `name` from the Nodes labelled with its id, and the Nodes left out.

    None when no Node can be used (invalid name, no known profile): discovery then deletes the
    UltraServer it owns under that name.
    """
    nodes = sorted(bodies, key=_name)
    if not valid_name(name):
        return None, [Skip(_name(b), f"UltraServer id {name!r} is not a valid object name")
                      for b in nodes]
    skips: list[Skip] = []
    profiles: dict[str, str] = {}
    for body in nodes:
        profile = node_profile(body, labels)
        if profile is None or _servers(profile) is None:
            instance = _labels(body).get(INSTANCE_TYPE_LABEL, "")
            skips.append(Skip(_name(body), f"no known profile (label {labels.profile}="
                              f"{_labels(body).get(labels.profile, '')!r}, instance type "
                              f"{instance!r})"))
        else:
            profiles[_name(body)] = profile
    if not profiles:
        return None, skips
    profile = Counter(profiles.values()).most_common(1)[0][0]
    servers = _servers(profile) or 0
    usable = []
    for body in nodes:
        other = profiles.get(_name(body))
        if other is None:
            continue
        if other != profile:
            skips.append(Skip(_name(body), f"profile {other} differs from {profile}, the "
                              f"profile of most Nodes of UltraServer {name}"))
        else:
            usable.append(body)

    by_index: dict[int, Body] = {}
    unindexed: list[Body] = []
    for body in usable:
        found = membership(_labels(body), labels)
        raw = found.index if found is not None else None
        if raw is None or found is None:
            unindexed.append(body)
            continue
        try:
            index = int(str(raw))
        except ValueError:
            skips.append(Skip(_name(body), f"label {found.index_source}={raw!r} is not a number"))
            continue
        if not 0 <= index < servers:
            skips.append(Skip(_name(body), f"server index {index} is outside 0..{servers - 1} "
                              f"of profile {profile}"))
        elif index in by_index:
            skips.append(Skip(_name(body), f"server index {index} is already Node "
                              f"{_name(by_index[index])}'s"))
        else:
            by_index[index] = body
    free = [i for i in range(servers) if i not in by_index]
    for body, slot in zip(unindexed, free, strict=False):
        by_index[slot] = body
    for body in unindexed[len(free):]:
        skips.append(Skip(_name(body), f"UltraServer {name} already has all {servers} "
                          f"servers of profile {profile}"))

    if not by_index:
        return None, skips
    ordered = [by_index[i] for i in sorted(by_index)]
    networks = Counter(node_network(b) for b in ordered)
    top = max(networks.values())
    network = next(n for n in map(node_network, ordered) if networks[n] == top)
    cordoned = tuple(i for i in range(servers) if i not in by_index or out_of_service(by_index[i]))
    return DiscoveredUltraServer(name=name, profile=profile, network=network,
                                 cordoned_servers=cordoned,
                                 nodes={i: _name(b) for i, b in sorted(by_index.items())}), skips
