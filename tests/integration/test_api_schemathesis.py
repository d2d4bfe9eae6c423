"""Property-based run of every operation of the app's own OpenAPI schema: zero 5xx.

Schemathesis generates valid and invalid requests from `/openapi.json` and
sends them to the real app (embedded backend, SQLite, demo stream on so
reads, dry runs and deletes meet a busy fleet). The only check is "no server
error": bad input must come back as a 4xx naming the field. Bounded to a few
dozen examples per operation so the run stays well under two minutes.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from ultraplane.api.app import create_app
from ultraplane.api.settings import Settings

_DB = Path(tempfile.mkdtemp(prefix="ultraplane-st-")) / "api.db"
app = create_app(Settings(db=f"sqlite:///{_DB}", demo=True, tick_seconds=0.05, time_scale=600))
schema = schemathesis.openapi.from_asgi("/openapi.json", app)
STATUSES: Counter[int] = Counter()


@pytest.fixture(scope="module", autouse=True)
def running_backend() -> Iterator[None]:
    with TestClient(app):  # runs the lifespan: starts the fleet, the ticker and the demo stream
        yield


@schema.parametrize()
@settings(max_examples=30, deadline=None,
          suppress_health_check=list(HealthCheck))
def test_no_server_errors(case: schemathesis.Case) -> None:
    response = case.call()
    STATUSES[response.status_code] += 1
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path}: {response.status_code} {response.text}"
    )
    case.validate_response(response, checks=[not_a_server_error])


def test_the_run_sent_both_good_and_bad_requests() -> None:
    """Guards the guard: a run that only saw 2xx (or nothing) would prove little."""
    assert sum(STATUSES.values()) >= 200, STATUSES
    assert any(200 <= code < 300 for code in STATUSES), STATUSES
    assert any(400 <= code < 500 for code in STATUSES), STATUSES
    assert not any(code >= 500 for code in STATUSES), STATUSES
