"""The whole product on a kind cluster, driven step by step through hack/kind-e2e.sh.

Each test is one step of the script, in order: build and load the image, install the chart
(two Ready operator replicas), apply examples/ (the UltraServers, then the jobs), see every job
Admitted and Running with energy accruing and the short fine-tune Succeeded with energy in its
status, check the REST API (including a job created and deleted through it), delete the jobs
and see every UltraServer's free chips back where they started. The cluster is created once
for the module and deleted at the end.

Needs a running Docker engine, kind and kubectl; without them the module is skipped with the
reason, unless ULTRAPLANE_REQUIRE_KIND=1 (set in the e2e workflow) turns that into a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "hack" / "kind-e2e.sh"
# Set once a step fails: the later steps build on it, so they fail fast with a pointer to it.
failed_step: list[str] = []


def missing_prerequisite() -> str | None:
    """Why this machine cannot run kind e2e, or None when it can."""
    if shutil.which("docker") is None:
        return "docker is not installed"
    info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=60)
    if info.returncode != 0:
        return "`docker info` fails: no running Docker engine on this machine"
    if shutil.which("kind") is None:
        return "kind is not installed (go install sigs.k8s.io/kind@v0.33.0)"
    if shutil.which("kubectl") is None:
        return "kubectl is not installed"
    return None


def run_step(step: str, timeout: int = 900) -> None:
    if failed_step:
        pytest.fail(f"not run: the earlier step {failed_step[0]!r} failed")
    result = subprocess.run(
        ["bash", str(SCRIPT), step], capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "KIND_CLUSTER_NAME": os.environ.get("KIND_CLUSTER_NAME", "ultraplane-e2e")},
    )
    if result.returncode != 0:
        failed_step.append(step)
        pytest.fail(f"hack/kind-e2e.sh {step} failed:\n{result.stdout[-4000:]}\n{result.stderr[-8000:]}")


@pytest.fixture(scope="module", autouse=True)
def kind_cluster() -> Iterator[None]:
    reason = missing_prerequisite()
    if reason is not None:
        if os.environ.get("ULTRAPLANE_REQUIRE_KIND") == "1":
            pytest.fail(f"ULTRAPLANE_REQUIRE_KIND=1 but {reason}")
        pytest.skip(f"kind e2e needs Docker and kind: {reason}")
    run_step("preflight")
    run_step("cluster", timeout=600)
    yield
    subprocess.run(["bash", str(SCRIPT), "teardown"], timeout=300, check=False)


@pytest.mark.timeout(1800)
def test_image_builds_and_loads_into_kind() -> None:
    run_step("image", timeout=1800)


def test_chart_installs_with_two_ready_operator_replicas() -> None:
    run_step("install")


def test_examples_apply() -> None:
    run_step("apply")


def test_jobs_are_admitted_run_and_succeed_with_energy() -> None:
    run_step("lifecycle")


def test_rest_api_serves_the_cluster_and_creates_and_deletes_jobs() -> None:
    run_step("rest")


def test_deleting_the_jobs_frees_every_chip_they_held() -> None:
    run_step("cleanup")
