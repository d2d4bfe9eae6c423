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
from tests.integration.operator_harness import Harness
from tests.integration.prometheuses import REQUIRE as REQUIRE_PROMETHEUS  # noqa: F401 (a tier)

REQUIRE_ENV = "ULTRAPLANE_REQUIRE_ENVTEST"
KUBE_FIXTURES = {"kube_env", "kube_namespace"}
_failed: list[str] = []
_kept_logs: list[Path] = []
_binaries: list[Path | Exception] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if KUBE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.kube)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Builds or finds the binaries before any test starts, when a selected test needs them.

    Here and not in the fixture: a first run builds kube-apiserver for about 20 minutes,
    which would otherwise count against the per-test timeout of whichever test came first.
    """
    if _binaries or not any(KUBE_FIXTURES & set(getattr(i, "fixturenames", ())) for i in session.items):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(
            "kube tier: hack/envtest.sh (builds kube-apiserver and etcd on a machine's first "
            "run, about 20 minutes; cached after)"
        )
    try:
        _binaries.append(find_binaries())
    except Exception as exc:  # reported by the kube_env fixture, as an error of its tests
        _binaries.append(exc)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    report = yield
    if report.failed:
        _failed.append(item.nodeid)
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Says where the logs are: a fixture's own prints are hidden by output capture."""
    for logs in _kept_logs:
        terminalreporter.write_line(
            f"kube tier: tests failed, etcd and kube-apiserver logs kept in {logs}", yellow=True
        )


@pytest.fixture(scope="session")
def kube_env() -> Iterator[KubeEnv]:
    """A real kube-apiserver + etcd with the project's CRDs installed."""
    found = _binaries[0] if _binaries else None
    try:
        if isinstance(found, Exception):
            raise found
        bin_dir = found if found is not None else find_binaries()
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
        _kept_logs.append(env.logs_dir)
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
            _kept_logs.append(env.logs_dir)
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


@pytest.fixture
def op(kube_env, kube_namespace: str, tmp_path: Path) -> Iterator[Harness]:  # type: ignore[no-untyped-def]
    """A live-operator harness on this test's namespace and fleet (stopped and cleaned after)."""
    h = Harness(kube_env, kube_namespace, tmp_path)
    try:
        yield h
    finally:
        h.stop()
        h.delete_fleet()
