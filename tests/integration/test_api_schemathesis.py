"""Property-based run of every operation of the app's own OpenAPI schema, with every check.

Schemathesis generates valid and invalid requests from `/openapi.json` and sends
them to the real app (embedded backend, SQLite, demo stream on so reads, dry runs
and deletes meet a busy fleet), in both auth modes: open (no token configured) and
locked (a static token; job requests need it, fleet reads stay open). Every
built-in check runs (no server error, status codes, content types, headers and
bodies as documented, schema-valid data accepted, schema-invalid data rejected,
auth not ignored, 405 with `Allow` for other methods, ...): the document must say
what the server does. One setting is ours: schema-valid data may also get 422 (rules
JSON Schema cannot state: chips that fit the profile's servers, preferredLevel not
farther than requiredLevel, a network level the fleet has) or 410 (a continue token
that is not one of this list's), each with a sentence naming the field. Bounded to
a few dozen examples per operation.
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
from schemathesis.config import SchemathesisConfig
from ultraplane.api.app import create_app
from ultraplane.api.settings import Settings

TOKEN = "schemathesis-token"


def _app(name: str, **extra: object) -> object:
    db = Path(tempfile.mkdtemp(prefix=f"ultraplane-st-{name}-")) / "api.db"
    return create_app(Settings(db=f"sqlite:///{db}", demo=True, tick_seconds=0.05,
                               time_scale=600, **extra))  # type: ignore[arg-type]


open_app = _app("open")
locked_app = _app("locked", api_tokens=TOKEN)
CONFIG = SchemathesisConfig.from_dict({"checks": {"positive_data_acceptance": {
    "expected-statuses": ["2xx", "401", "403", "404", "409", "410", "422"]}}})
open_schema = schemathesis.openapi.from_asgi("/openapi.json", open_app, config=CONFIG)
locked_schema = schemathesis.openapi.from_asgi("/openapi.json", locked_app, config=CONFIG)
STATUSES: dict[str, Counter[int]] = {"open": Counter(), "locked": Counter()}
FEW = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module", autouse=True)
def running_backends() -> Iterator[None]:
    # The lifespans start the fleets, the tickers and the demo streams.
    with TestClient(open_app), TestClient(locked_app):  # type: ignore[arg-type]
        yield


@open_schema.parametrize()
@FEW
def test_open_mode_passes_every_check(case: schemathesis.Case) -> None:
    response = case.call_and_validate()
    STATUSES["open"][response.status_code] += 1


@locked_schema.parametrize()
@FEW
def test_locked_mode_passes_every_check(case: schemathesis.Case) -> None:
    # A negative case may drop the Authorization header on purpose (its `required` violated):
    # it must reach the server without one and be refused. Every other case carries a
    # generated bearer value, which the real token replaces.
    sent = case.headers or {}
    headers = {"Authorization": f"Bearer {TOKEN}"} if "Authorization" in sent else None
    response = case.call_and_validate(headers=headers)
    STATUSES["locked"][response.status_code] += 1


def test_locked_mode_refuses_what_it_documents_as_secured() -> None:
    with TestClient(locked_app) as client:  # type: ignore[arg-type]
        paths = client.get("/openapi.json").json()["paths"]
        secured = {(m, p) for p, ops in paths.items() for m, op in ops.items()
                   if op.get("security")}
        assert ("post", "/v1/namespaces/{namespace}/trainingjobs") in secured
        assert ("get", "/v1/capacity") not in secured
        assert client.get("/v1/trainingjobs").status_code == 401
    with TestClient(open_app) as client:  # type: ignore[arg-type]
        doc = client.get("/openapi.json").json()
        assert not any(op.get("security") for ops in doc["paths"].values() for op in ops.values())


@pytest.mark.parametrize("mode", ["open", "locked"])
def test_the_run_sent_both_good_and_bad_requests(mode: str) -> None:
    """Guards the guard: a run that only saw 2xx (or nothing) would prove little."""
    statuses = STATUSES[mode]
    assert sum(statuses.values()) >= 150, statuses
    assert any(200 <= code < 300 for code in statuses), statuses
    assert any(400 <= code < 500 for code in statuses), statuses
    assert not any(code >= 500 for code in statuses), statuses


NULL_CASES = [  # (kind, field, value): an explicit null is "not given", for the server and the document
    ("inferencejobs", "load", {"requestsPerSecond": 10}),
    ("inferencejobs", "load", {"requestsPerSecond": 10, "tokensPerSecond": None}),
    ("inferencejobs", "load", {"requestsPerSecond": None, "tokensPerSecond": 100}),
    ("inferencejobs", "load", {"requestsPerSecond": 10, "tokensPerSecond": 100}),
    ("inferencejobs", "load", {"requestsPerSecond": None, "tokensPerSecond": None}),
    ("inferencejobs", "load", {}),
    ("trainingjobs", "work", {"durationSeconds": 60}),
    ("trainingjobs", "work", {"durationSeconds": 60, "steps": None, "tokensPerStep": None}),
    ("trainingjobs", "work", {"durationSeconds": None, "steps": 10, "tokensPerStep": 1024}),
    ("trainingjobs", "work", {"durationSeconds": 60, "steps": 10, "tokensPerStep": 1024}),
    ("trainingjobs", "work", {"steps": 10, "tokensPerStep": None}),
    ("trainingjobs", "work", {"durationSeconds": None}),
]


def test_the_documents_one_of_rules_agree_with_the_server_on_nulls() -> None:
    """Schemathesis found `"tokensPerSecond": null` beside a rate accepted (201) while the
    document's `oneOf` called it invalid: `required` counts a null as given, the models do not."""
    import jsonschema_rs  # schemathesis's own validator

    with TestClient(open_app) as client:  # type: ignore[arg-type]
        schemas = client.get("/openapi.json").json()["components"]["schemas"]
        for i, (plural, field, value) in enumerate(NULL_CASES):
            schema = schemas["LoadTarget" if field == "load" else "Work"]
            documented = jsonschema_rs.Draft202012Validator(schema).is_valid(value)
            spec: dict[str, object] = {field: value}
            if plural == "inferencejobs":
                spec.update(chipsPerReplica=4, model={"name": "m"})
            else:
                spec.update(chips=4, model={"name": "m", "parametersBillions": 1})  # steps need it
            answer = client.post(f"/v1/namespaces/nulls/{plural}",
                                 json={"metadata": {"name": f"n{i}"}, "spec": spec})
            assert answer.status_code in (201, 422), answer.text
            assert documented == (answer.status_code == 201), (value, answer.text)
