"""The Node labels that make a Kubernetes Node one server of an UltraServer, and its profile.

Why in the core: two adapters read the same labels and must agree on them. The operator's
discovery (`ultraplane operator --ultraservers-from-nodes`, `operator/nodes.py`) groups the
labelled Nodes into UltraServer objects, and the simulator's fake Neuron device plugin
(`ultraplane simulator device-plugin`) advertises the chips of the server its Node is. If the
keys or the profile rule lived in one adapter, the other would copy them and the copies would
drift; here they are plain data with no API client.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"

# Instance type -> profile. trn2u.48xlarge is AWS's (the Trn2 UltraServer u-trn2x64 is four of
# them). The Trn3 names are an assumption: AWS has not published them in the project's sources;
# label such Nodes `ultraplane.dev/profile` to be sure.
INSTANCE_PROFILES: Mapping[str, str] = {
    "trn2u.48xlarge": "trn2",
    "trn3u.48xlarge": "trn3-gen1",  # assumption: 16 chips per instance, 4 per UltraServer
    "trn3u.12xlarge": "trn3-gen2",  # assumption: 4 chips per server, 36 per UltraServer
}


@dataclass(frozen=True)
class NodeLabels:
    """The label keys read from a Node (the first two are configurable on the command line)."""

    ultraserver: str = "ultraplane.dev/ultraserver"
    server_index: str = "ultraplane.dev/server-index"
    profile: str = "ultraplane.dev/profile"


DEFAULT_LABELS = NodeLabels()


def labelled_profile(labels: Mapping[str, str], keys: NodeLabels = DEFAULT_LABELS) -> str | None:
    """A Node's profile from its labels: the profile label, else its instance type's; None when
    neither says (the name is not checked against the known profiles here)."""
    explicit = labels.get(keys.profile)
    if explicit:
        return str(explicit)
    return INSTANCE_PROFILES.get(str(labels.get(INSTANCE_TYPE_LABEL, "")))
