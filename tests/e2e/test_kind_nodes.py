"""UltraServers built from Nodes on kind: the workers labelled as two servers of one Gen2
UltraServer, the way EKS labels Trn3 nodes (docs/install.md), and `operator.ultraserversFromNodes`
turned on with `helm upgrade`. The operator writes the UltraServer from the Nodes; cordoning
a Node takes its server's chips out of new placements, uncordoning gives them back.

The example fleet is deleted first (the kind session owns the cluster; `workers_as_servers`),
so the Node-built UltraServer is the only place a job can go.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import NAMESPACE, RELEASE
from tests.e2e.kinds import Kind, condition, wait_until, workers_as_servers

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

US = "kind-us-0"
JOBS_NS = "default"


def job(name: str, chips: int) -> str:
    return f"""
apiVersion: ultraplane.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}, labels: {{e2e: nodes}}}}
spec:
  chips: {chips}
  profile: trn3-gen2
  topology: {{wholeServers: true}}
  work: {{durationSeconds: 31536000}}
"""


def status(kind: Kind, name: str) -> dict[str, Any]:
    body = kind.get("trainingjob", name, "-n", JOBS_NS)
    result: dict[str, Any] = body.get("status") or {}
    return result


def test_ultraservers_from_labelled_nodes_and_cordons(release: Kind) -> None:
    nodes = workers_as_servers(release, US, "topology.k8s.aws/network-node-layer-1=kind-spine",
                               "topology.k8s.aws/network-node-layer-2=kind-block")
    second = nodes[1]
    release.helm_run("upgrade", RELEASE, "helm/ultraplane", "--namespace", NAMESPACE, "--reuse-values",
                     "--set", "operator.ultraserversFromNodes=true", "--wait", "--timeout", "10m",
                     timeout=900)
    us = wait_until(f"UltraServer {US} built from the Nodes", lambda: next(
        (u for u in release.items("ultraservers") if u["metadata"]["name"] == US), None), timeout=180)
    assert us["metadata"]["labels"]["ultraplane.dev/managed-by"] == "nodes"
    assert us["spec"]["network"] == ["kind-block", "kind-spine"]
    # Two of the profile's 36 servers have Nodes; every other index is out of service.
    cordoned = set(us["spec"]["cordonedServers"])
    assert 0 not in cordoned and 1 not in cordoned and len(cordoned) == 34, cordoned

    # Both servers usable: an 8-chip whole-server job takes both.
    release.apply(job("nodes-both", 8), "-n", JOBS_NS)
    both = wait_until("nodes-both admitted", lambda: condition(
        release.get("trainingjob", "nodes-both", "-n", JOBS_NS), "Admitted") == "True"
        and status(release, "nodes-both"), timeout=180)
    assert sorted(both["allocation"]["servers"]) == [f"{US}/s00", f"{US}/s01"]
    release.kc("delete", "trainingjob", "nodes-both", "-n", JOBS_NS, "--wait", timeout=120)

    # Cordon the second worker: its server leaves new placements.
    release.kc("cordon", second)
    wait_until("server 1 cordoned in the UltraServer", lambda: 1 in release.get(
        "ultraserver", US)["spec"]["cordonedServers"], timeout=120)
    release.apply(job("nodes-big", 8) + "---" + job("nodes-small", 4), "-n", JOBS_NS)
    small = wait_until("nodes-small admitted", lambda: condition(
        release.get("trainingjob", "nodes-small", "-n", JOBS_NS), "Admitted") == "True"
        and status(release, "nodes-small"), timeout=180)
    assert small["allocation"]["servers"] == [f"{US}/s00"]
    assert all(c.startswith(f"{US}/s00/") for c in small["allocation"]["chips"])
    big = status(release, "nodes-big")
    assert big.get("phase") in (None, "Pending"), big
    assert not (big.get("allocation") or {}).get("chips")

    # Uncordon: the big job fits again once the small one is gone.
    release.kc("uncordon", second)
    release.kc("delete", "trainingjob", "nodes-small", "-n", JOBS_NS, "--wait", timeout=120)
    big = wait_until("nodes-big admitted after the uncordon", lambda: condition(
        release.get("trainingjob", "nodes-big", "-n", JOBS_NS), "Admitted") == "True"
        and status(release, "nodes-big"), timeout=180)
    assert sorted(big["allocation"]["servers"]) == [f"{US}/s00", f"{US}/s01"]
    release.kc("delete", "trainingjobs", "-l", "e2e=nodes", "-n", JOBS_NS, "--wait", timeout=120)
