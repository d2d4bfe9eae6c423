"""Node labels exactly as a Trn2 UltraServer node group on Amazon EKS carries them.

Shared by the unit, API server and kind tiers, so all three check discovery against one
picture of a real node group. The keys and the shape of the values follow AWS's own pages
(cited in `ultraplane/pods/nodelabels.py`): a 16-character lowercase `server-id-4` shared by the
four nodes of one UltraServer, two `server-id-2` values (one per pair), `node-id-4` 0..3,
`node-id-2` 0..1 within each pair, mode `1_2_4`, instance type `trn2u.48xlarge`, and EKS's
`network-node-layer-1..3` (`nn-` ids, layer 1 the broadest).
"""

from __future__ import annotations

from dataclasses import dataclass

MODE = "neuron.amazonaws.com/ultraserver-mode"
SERVER_ID = "neuron.amazonaws.com/ultraserver-server-id-{}"
NODE_ID = "neuron.amazonaws.com/ultraserver-node-id-{}"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LAYER = "topology.k8s.aws/network-node-layer-{}"
EKS_KEYS = (MODE, *(SERVER_ID.format(n) for n in (2, 4)), *(NODE_ID.format(n) for n in (2, 4)),
            INSTANCE_TYPE, *(LAYER.format(n) for n in (1, 2, 3)))


@dataclass(frozen=True)
class EksUltraServer:
    """One UltraServer of four trn2u.48xlarge nodes: its ids and its EC2 network path."""

    server_id_4: str  # 16 lowercase characters, as AWS shows them
    pairs: tuple[str, str]  # the two server-id-2 values
    layers: tuple[str, str, str]  # network-node-layer-1 (broadest), -2, -3

    def labels(self, node_id: int, *, mode: str = "1_2_4") -> dict[str, str]:
        """The labels of the node with `node-id-4` = `node_id` (0..3)."""
        return {
            MODE: mode,
            SERVER_ID.format(4): self.server_id_4,
            NODE_ID.format(4): str(node_id),
            SERVER_ID.format(2): self.pairs[node_id // 2],
            NODE_ID.format(2): str(node_id % 2),
            INSTANCE_TYPE: "trn2u.48xlarge",
            **{LAYER.format(i + 1): v for i, v in enumerate(self.layers)},
        }

    @property
    def network(self) -> list[str]:
        """The UltraServer's `spec.network`: nearest (layer 3) first."""
        return list(reversed(self.layers))


# Two UltraServers under one layer-1 and layer-2 node, each behind its own layer-3 node.
US_A = EksUltraServer("bog79p1y8tetj5uu", ("u5wy80u0o2saugxy", "ygml2651y0lwdd46"),
                      ("nn-e50490a237cb0f01a", "nn-1d7ac0f4e0a1b2c3d", "nn-9f2b6e1c7a3d4e5f6"))
US_B = EksUltraServer("k3x9q2m7w1v8z0ta", ("p4r8t2y6u0i3o5pa", "h7j1k5l9z3x6c0va"),
                      ("nn-e50490a237cb0f01a", "nn-1d7ac0f4e0a1b2c3d", "nn-0a1b2c3d4e5f60718"))
