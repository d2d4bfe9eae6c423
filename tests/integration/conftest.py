"""Fixtures of the real kube-apiserver + etcd tier (see docs/testing.md).

``kube_env`` (session) builds or finds the binaries with hack/envtest.sh, starts etcd and
kube-apiserver, applies ``crds/*.yaml`` and waits until they are Established.
``kube_namespace`` (function) gives each test a fresh namespace. Tests using either get the
``kube`` marker automatically, so ``pytest -m "not kube"`` leaves the tier out.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_or_skip
from tests.integration.kube_tier import KubeEnv, TierUnavailable, find_binaries

REQUIRE_ENV = "ULTRAPLANE_REQUIRE_ENVTEST"
KUBE_FIXTURES = {"kube_env", "kube_namespace"}
_failed: list[str] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if KUBE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.kube)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    report = yield
    if report.failed:
        _failed.append(item.nodeid)
    return report


@pytest.fixture(scope="session")
def kube_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeEnv]:
    """A real kube-apiserver + etcd with the project's CRDs installed."""
    try:
        bin_dir = find_binaries()
    except TierUnavailable as exc:
        require_or_skip(REQUIRE_ENV, str(exc))
    # Outside pytest's tmp dirs: those are pruned after three runs, and a kept log must stay.
    workdir = Path(tempfile.mkdtemp(prefix="ultraplane-kube-"))
    env = KubeEnv(bin_dir=bin_dir, workdir=workdir)
    try:
        env.start()
    except TierUnavailable as exc:
        env.stop()
        require_or_skip(REQUIRE_ENV, str(exc))
    except BaseException:
        env.stop()
        print(f"\nkube tier failed to start; logs kept in {env.logs_dir}")
        raise
    try:
        env.apply_crds()
        yield env
    except BaseException:
        _failed.append("kube_env")
        raise
    finally:
        env.stop()
        if _failed:
            print(f"\nkube tier: tests failed, server logs kept in {env.logs_dir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def kube_namespace(kube_env: KubeEnv) -> Iterator[str]:
    """A fresh namespace, deleted (without waiting) after the test."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    kube_env.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        kube_env.kubectl("delete", "namespace", name, "--wait=false", check=False)
