"""`helm uninstall` leaves no workload behind: no pod, Deployment, Service, ServiceAccount,
Role or binding of the release, and no cluster-wide RBAC object of it. The CRDs stay (Helm never
deletes what it installed from `crds/`, so users' jobs are not lost with a release) and so do
the custom resources; docs/install.md says how to remove them."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import NAMESPACE, RELEASE
from tests.e2e.kinds import Kind, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

SELECTOR = f"app.kubernetes.io/instance={RELEASE}"


def test_helm_uninstall_leaves_no_workload_behind(release: Kind) -> None:
    assert release.items("deployments", "-n", NAMESPACE, "-l", SELECTOR), "the release is not installed"
    release.helm_run("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "5m",
                     timeout=600)
    namespaced = "pods,deployments,replicasets,services,serviceaccounts,roles,rolebindings,configmaps," \
                 "secrets,networkpolicies,poddisruptionbudgets"
    wait_until("no namespaced object of the release", lambda: not release.items(
        namespaced, "-n", NAMESPACE, "-l", SELECTOR), timeout=300,
        last=lambda: str([o["metadata"]["name"] for o in release.items(namespaced, "-n", NAMESPACE, "-l", SELECTOR)]))
    assert not release.items("clusterroles,clusterrolebindings", "-l", SELECTOR)
    assert not release.items("pods,deployments,daemonsets,services", "-A", "-l", SELECTOR)
    assert not release.items("pods", "-n", NAMESPACE), "a pod is left in the release namespace"
    crds = {c["metadata"]["name"] for c in release.items("crds")}
    assert {"ultraservers.ultraplane.dev", "trainingjobs.ultraplane.dev",
            "inferencejobs.ultraplane.dev"} <= crds
