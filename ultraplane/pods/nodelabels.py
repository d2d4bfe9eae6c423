"""The Node labels that make a Kubernetes Node one server of an UltraServer, and its profile.

Why in the core: three adapters read the same labels and must agree on them. The operator's
discovery (`ultraplane operator --ultraservers-from-nodes`, `operator/nodes.py`) groups the
labelled Nodes into UltraServer objects, its pod plane maps each server to its Node by the same
rules, and the simulator's fake Neuron device plugin (`ultraplane simulator device-plugin`)
advertises the chips of the server its Node is. If the keys or the rules lived in one adapter,
the others would copy them and the copies would drift; here they are plain data with no API
client.

Why these labels: on Amazon EKS a Trn2 UltraServer node group is already described by labels
that AWS puts on its Nodes, so an admin labels nothing (zero-label adoption). Ultraplane's own
`ultraplane.dev/*` labels stay, each one overriding the AWS label it stands for.

The table, with where each label comes from:

  `node.kubernetes.io/instance-type` (set by the kubelet / EKS)
      `trn2u.48xlarge` is the Trn2 UltraServer instance: AWS Neuron docs, "How to schedule
      MPI jobs to run on Neuron UltraServer on EKS" (nodeSelector of every example),
      https://awsdocs-neuron.readthedocs-hosted.com/en/latest/containers/how-to/how-to-ultraserver.html
  `neuron.amazonaws.com/ultraserver-mode` (Neuron device plugin)
      the UltraServer modes the node supports, underscore-separated: the same page shows
      `1_2_4` on the four nodes of one UltraServer; its init script accepts node configs 4, 2
      and 1 (nodes working as one UltraServer) and numbers the driver's modes (sysfs
      `ultraserver_mode`) otherwise: 1 = 4 nodes, 2 and 3 = 2 nodes (two layouts), 4 = 1 node.
  `neuron.amazonaws.com/ultraserver-server-id-4` / `-2` (Neuron device plugin)
      the id the nodes of one 4-node (2-node) UltraServer config share: the page's pod
      affinity uses them as the topologyKey that keeps a job inside one UltraServer, and its
      example lists four nodes with one `server-id-4` value and two `server-id-2` values.
  `neuron.amazonaws.com/ultraserver-node-id-4` / `-2` (Neuron device plugin)
      the node's index inside that config, 0..N-1 (the page's example: 0, 1, 2, 3 for -4 and
      0, 1 in each pair for -2). The init script, `k8s-ultraserver-init-script.sh` in
      github.com/aws-neuron/aws-neuron-sdk (src/k8), reads the same values from the driver
      (`/sys/class/neuron_device/server_id_N`, `node_id_N`) and uses `0000000000000000` and
      `-1` for "not in such a config".
  `topology.k8s.aws/network-node-layer-1` .. `-4` (EKS)
      the node's place in the EC2 network, layer 1 the top (broadest, least selective), layer
      3 the bottom for most instance types, layer 4 only on types with four layers: Amazon EKS
      User Guide, "Place distributed AI/ML workloads with network topology labels",
      https://docs.aws.amazon.com/eks/latest/userguide/ml-workload-topology.html, and Amazon
      EC2 User Guide, "How Amazon EC2 topology works".

Assumptions (stated, not found in AWS's pages):
  - AWS's pages do not say which of the two numberings the mode label uses, so a config is
    ruled out only when neither allows it: the 4-node config needs a 1 or a 4 in the label, the
    2-node config a 2 or a 3 (`1_2_4` allows both). The id labels then decide, and they are
    the driver's "none" value outside a config. A mode label that is not numbers is ignored;
  - the Neuron device plugin 2.30 or later puts these labels on the Node (the AWS page above
    asks for device plugin 2.26.26.0 or later for its affinity rules);
  - the Trn3 instance names below are not published in the sources above; label such Nodes
    `ultraplane.dev/profile` to be sure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
NEURON_MODE_LABEL = "neuron.amazonaws.com/ultraserver-mode"
NEURON_SERVER_ID_LABEL = "neuron.amazonaws.com/ultraserver-server-id-{}"
NEURON_NODE_ID_LABEL = "neuron.amazonaws.com/ultraserver-node-id-{}"
# Node configs with an id label, largest first: the largest a node is in is its UltraServer.
NEURON_CONFIGS = (4, 2)
# The mode values that allow each config, under either numbering (see above).
NEURON_MODES_OF_CONFIG: Mapping[int, frozenset[int]] = {4: frozenset({4, 1}),
                                                         2: frozenset({2, 3})}
# The driver's "not in such a config" values (k8s-ultraserver-init-script.sh).
NEURON_NO_SERVER_ID = "0000000000000000"
NEURON_NO_NODE_ID = "-1"
NETWORK_LAYER_LABEL = "topology.k8s.aws/network-node-layer-{}"
NETWORK_LAYERS = 4

# Instance type -> profile. trn2u.48xlarge is AWS's (the Trn2 UltraServer u-trn2x64 is four of
# them). The Trn3 names are an assumption (see above).
INSTANCE_PROFILES: Mapping[str, str] = {
    "trn2u.48xlarge": "trn2",
    "trn3u.48xlarge": "trn3-gen1",  # assumption: 16 chips per instance, 4 per UltraServer
    "trn3u.12xlarge": "trn3-gen2",  # assumption: 4 chips per server, 36 per UltraServer
}


@dataclass(frozen=True)
class NodeLabels:
    """Ultraplane's own label keys (the first two are configurable on the command line), each
    an override of the AWS label it stands for; `neuron` False reads only these."""

    ultraserver: str = "ultraplane.dev/ultraserver"
    server_index: str = "ultraplane.dev/server-index"
    profile: str = "ultraplane.dev/profile"
    neuron: bool = True

    def selectors(self) -> tuple[str, ...]:
        """Label selectors (key exists) whose union is every Node that may be a server."""
        if not self.neuron:
            return (self.ultraserver,)
        return (self.ultraserver, *(NEURON_SERVER_ID_LABEL.format(n) for n in NEURON_CONFIGS))


DEFAULT_LABELS = NodeLabels()


@dataclass(frozen=True)
class Membership:
    """Which UltraServer a Node's labels put it in, its raw index, and the labels that said so."""

    ultraserver: str
    index: str | None
    source: str  # the label key of the id
    index_source: str  # the label key the index is (or would be) read from


def neuron_modes(labels: Mapping[str, str]) -> frozenset[int] | None:
    """The numbers of the mode label (`1_2_4` -> {1, 2, 4}); None when absent or not numbers
    (then the id labels decide alone)."""
    raw = str(labels.get(NEURON_MODE_LABEL, "")).strip()
    if not raw:
        return None
    parts = [p for p in raw.replace(",", "_").replace("-", "_").split("_") if p]
    if not parts or not all(p.isdigit() for p in parts):
        return None
    return frozenset(int(p) for p in parts)


def _neuron_membership(labels: Mapping[str, str]) -> tuple[str, str | None, int] | None:
    modes = neuron_modes(labels)
    for n in NEURON_CONFIGS:
        if modes is not None and not modes & NEURON_MODES_OF_CONFIG[n]:
            continue
        server = str(labels.get(NEURON_SERVER_ID_LABEL.format(n), "")).strip()
        if not server or server == NEURON_NO_SERVER_ID:
            continue
        node = labels.get(NEURON_NODE_ID_LABEL.format(n))
        index = None if node is None or str(node).strip() == NEURON_NO_NODE_ID else str(node)
        return server, index, n
    return None


def membership(labels: Mapping[str, str], keys: NodeLabels = DEFAULT_LABELS) -> Membership | None:
    """The Node's UltraServer id and server index: our labels where set, else the Neuron device
    plugin's largest config; None when the Node is in no UltraServer."""
    ours = labels.get(keys.ultraserver)
    explicit_index = labels.get(keys.server_index)
    if ours:
        return Membership(str(ours), None if explicit_index is None else str(explicit_index),
                          keys.ultraserver, keys.server_index)
    found = _neuron_membership(labels) if keys.neuron else None
    if found is None:
        return None
    server, index, n = found
    if explicit_index is not None:
        return Membership(server, str(explicit_index), NEURON_SERVER_ID_LABEL.format(n),
                          keys.server_index)
    return Membership(server, index, NEURON_SERVER_ID_LABEL.format(n),
                      NEURON_NODE_ID_LABEL.format(n))


def labelled_profile(labels: Mapping[str, str], keys: NodeLabels = DEFAULT_LABELS) -> str | None:
    """A Node's profile from its labels: the profile label, else its instance type's; None when
    neither says (the name is not checked against the known profiles here)."""
    explicit = labels.get(keys.profile)
    if explicit:
        return str(explicit)
    return INSTANCE_PROFILES.get(str(labels.get(INSTANCE_TYPE_LABEL, "")))


def network(labels: Mapping[str, str]) -> tuple[str, ...]:
    """The EC2 network nodes above the Node, nearest first (highest layer number first), as an
    UltraServer's `spec.network` lists them."""
    layers = (labels.get(NETWORK_LAYER_LABEL.format(n)) for n in range(NETWORK_LAYERS, 0, -1))
    return tuple(str(v) for v in layers if v)
