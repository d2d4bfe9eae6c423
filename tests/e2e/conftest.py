"""e2e tests run last: they are the slowest and need the most (Docker, kind, a built image).

pytest collects `tests/e2e` before `tests/integration` and `tests/unit` (alphabetical), so
this hook moves every test marked `e2e` to the end of the session, keeping their order.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    e2e = [item for item in items if item.get_closest_marker("e2e") is not None]
    if e2e:
        rest = [item for item in items if item.get_closest_marker("e2e") is None]
        items[:] = rest + e2e
