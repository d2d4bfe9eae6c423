"""Bearer tokens on the real app: mutating calls need one once tokens exist; reads by setting."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from ultraplane.api.app import create_app
from ultraplane.api.auth import Guard, load_tokens
from ultraplane.api.settings import Settings

CREATE = ("POST", "/v1/namespaces/a/trainingjobs",
          {"metadata": {"name": "j"}, "spec": {"chips": 4, "work": {"durationSeconds": 60}}})
DELETE = ("DELETE", "/v1/namespaces/a/trainingjobs/j", None)
READ = ("GET", "/v1/ultraservers", None)
DRY = ("POST", "/v1/placements:dryRun", {"chips": 4})


def _client(tmp_path: Path, **settings: Any) -> Iterator[TestClient]:
    app = create_app(Settings(db=f"sqlite:///{tmp_path / 'a.db'}", demo=False, **settings))
    with TestClient(app) as client:
        yield client


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[TestClient]:
    yield from _client(tmp_path, api_tokens="s3cret, other-token")


def _call(client: TestClient, call: tuple[str, str, Any], token: str | None = None) -> int:
    method, path, body = call
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return client.request(method, path, json=body, headers=headers).status_code


@pytest.mark.parametrize(
    ("call", "token", "status"),
    [
        (CREATE, None, 401),
        (CREATE, "wrong", 403),
        (CREATE, "s3cret", 201),
        (CREATE, "other-token", 201),
        (DELETE, None, 401),
        (READ, None, 200),  # reads stay open by default
        (DRY, None, 200),  # a dry run takes nothing, so it is a read
    ],
)
def test_tokens_guard_mutations(locked: TestClient, call: tuple[str, str, Any],
                                token: str | None, status: int) -> None:
    assert _call(locked, call, token) == status


def test_error_body_and_challenge(locked: TestClient) -> None:
    r = locked.post(CREATE[1], json=CREATE[2])
    assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer"
    assert r.json() == {"error": "Unauthorized", "field": "Authorization",
                        "message": "a bearer token is required"}


def test_delete_with_token_after_create(locked: TestClient) -> None:
    assert _call(locked, CREATE, "s3cret") == 201
    assert _call(locked, DELETE, "wrong") == 403
    assert _call(locked, DELETE, "s3cret") == 200


def test_protected_reads(tmp_path: Path) -> None:
    for client in _client(tmp_path, api_tokens="t1", api_protect_reads=True):
        assert _call(client, READ) == 401
        assert _call(client, READ, "t1") == 200
        assert client.get("/healthz").status_code == 200  # probes never need a token
        assert client.get("/metrics").status_code == 200


def test_no_tokens_means_open(tmp_path: Path) -> None:
    for client in _client(tmp_path):
        assert _call(client, CREATE) == 201


def test_token_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("# operators\nfrom-file\n\n")
    for client in _client(tmp_path, token_file=str(path)):
        assert _call(client, CREATE) == 401
        assert _call(client, CREATE, "from-file") == 201


def test_unreadable_token_file_is_an_error_not_open_access(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"token file .* cannot be read"):
        load_tokens(Settings(db="sqlite://", token_file=str(tmp_path / "missing")))


def test_token_review_accepts_what_the_cluster_accepts() -> None:
    guard = Guard(frozenset({"static"}), reviewer=lambda t: t == "sa-token")
    assert guard.accepts("static") and guard.accepts("sa-token") and not guard.accepts("nope")
