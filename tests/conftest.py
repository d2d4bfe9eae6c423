"""Shared test policy: real-service tiers skip on a laptop, fail in CI; e2e runs last.

A tier that needs a real service (the kube-apiserver + etcd tier, PostgreSQL) skips with a
reason on a machine that lacks it. CI sets ``ULTRAPLANE_REQUIRE_ENVTEST=1`` /
``ULTRAPLANE_REQUIRE_POSTGRES=1`` so the same condition is a failure there: a green CI run
then proves those tiers really ran.

Use from a fixture, either through the ``require_or_skip`` fixture or by import::

    from tests.conftest import require_or_skip
    require_or_skip("ULTRAPLANE_REQUIRE_POSTGRES", "needs PostgreSQL's initdb on PATH")
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NoReturn

import pytest
from hypothesis import settings

TRUTHY = {"1", "true", "yes", "on"}

# Property tests draw the same examples on every run (a run that finds a counterexample is a
# bug to fix, never a flaky CI): `ULTRAPLANE_HYPOTHESIS=explore` draws new ones, to look for
# counterexamples on purpose.
settings.register_profile("deterministic", derandomize=True, database=None)
settings.register_profile("explore")
settings.load_profile(
    "explore" if os.environ.get("ULTRAPLANE_HYPOTHESIS") == "explore" else "deterministic")


def required(env_var: str) -> bool:
    """Whether CI demands the tier named by ``env_var`` (e.g. ULTRAPLANE_REQUIRE_ENVTEST)."""
    return os.environ.get(env_var, "").strip().lower() in TRUTHY


def require_or_skip(env_var: str, reason: str) -> NoReturn:
    """Skips with ``reason``, or fails with it when ``env_var`` says the tier is required."""
    if required(env_var):
        pytest.fail(f"{reason} ({env_var} is set, so this tier may not be skipped)",
                    pytrace=False)
    pytest.skip(reason)


@pytest.fixture(name="require_or_skip", scope="session")
def require_or_skip_fixture() -> Callable[[str, str], NoReturn]:
    """The same helper for fixtures that prefer injection to imports."""
    return require_or_skip


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Moves e2e tests to the end: they are the slowest and need the most machinery.

    trylast, so markers added by other conftests' hooks are already there; the sort is
    stable, so the order within each group is kept.
    """
    items.sort(key=lambda item: item.get_closest_marker("e2e") is not None)
