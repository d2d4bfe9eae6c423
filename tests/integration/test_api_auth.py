"""Bearer tokens on the real app: once tokens exist, every job request needs one that grants
its verb in its namespace; fleet-wide reads (UltraServers, capacity, dry runs) by setting."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from ultraplane.api.access.auth import Access, Guard, load_tokens
from ultraplane.api.access.tokens import parse_line
from ultraplane.api.app import create_app
from ultraplane.api.errors import ApiError
from ultraplane.api.settings import Settings

CREATE = ("POST", "/v1/namespaces/a/trainingjobs",
          {"metadata": {"name": "j"}, "spec": {"chips": 4, "work": {"durationSeconds": 60}}})
DELETE = ("DELETE", "/v1/namespaces/a/trainingjobs/j", None)
READ = ("GET", "/v1/ultraservers", None)
DRY = ("POST", "/v1/placements:dryRun", {"chips": 4})
LIST = ("GET", "/v1/namespaces/a/trainingjobs", None)


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
        (CREATE, "wrong", 401),
        (CREATE, "s3cret", 201),
        (CREATE, "other-token", 201),
        (DELETE, None, 401),
        (LIST, None, 401),  # job reads are authorized too: they name other teams' work
        (LIST, "s3cret", 200),
        (READ, None, 200),  # reads stay open by default
        (DRY, None, 401),  # a dry run costs CPU: once tokens are on, it needs one
        (DRY, "s3cret", 200),
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
    assert _call(locked, DELETE, "wrong") == 401
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
    class Reviews:
        def authenticate(self, token: str) -> Any:
            from ultraplane.api.access.kubereviews import UserInfo
            return UserInfo(username="sa") if token == "sa-token" else None

    guard = Guard(load_tokens(Settings(db="sqlite://", api_tokens="static")),
                  reviews=Reviews())  # type: ignore[arg-type]
    for token, name in (("static", "token-"), ("sa-token", "sa")):
        assert guard.authenticate(_bearer(token)).name.startswith(name)
    with pytest.raises(ApiError) as err:
        guard.authenticate(_bearer("nope"))
    assert err.value.status == 401


def _bearer(token: str) -> Any:
    from fastapi.security import HTTPAuthorizationCredentials
    return HTTPAuthorizationCredentials(scheme="Bearer", credentials=token)


SCOPED = """# one line per token: TOKEN [namespaces=...] [verbs=...] [name=...]
admin
team-a  namespaces=a  verbs=get,list,create,delete  name=ci-a
viewer  verbs=get,list  name=viewer
"""


@pytest.fixture
def scoped(tmp_path: Path) -> Iterator[TestClient]:
    path = tmp_path / "tokens"
    path.write_text(SCOPED)
    yield from _client(tmp_path, token_file=str(path))


def _in(namespace: str, call: tuple[str, str, Any]) -> tuple[str, str, Any]:
    return call[0], call[1].replace("/namespaces/a/", f"/namespaces/{namespace}/"), call[2]


@pytest.mark.parametrize(
    ("token", "namespace", "create", "read", "delete"),
    [
        ("admin", "b", 201, 200, 200),
        ("team-a", "a", 201, 200, 200),
        ("team-a", "victim", 403, 403, 403),  # another team's namespace: nothing at all
        ("viewer", "a", 403, 200, 403),  # reads everywhere, writes nowhere
    ],
)
def test_tokens_carry_namespaces_and_verbs(scoped: TestClient, token: str, namespace: str,
                                           create: int, read: int, delete: int) -> None:
    assert _call(scoped, _in(namespace, CREATE), token) == create
    if create != 201:  # the job to read and delete, made by the admin
        assert _call(scoped, _in(namespace, CREATE), "admin") == 201
    assert _call(scoped, ("GET", f"/v1/namespaces/{namespace}/trainingjobs/j", None), token) == read
    assert _call(scoped, _in(namespace, LIST), token) == read
    assert _call(scoped, _in(namespace, DELETE), token) == delete


def test_forbidden_names_the_caller_verb_and_namespace(scoped: TestClient) -> None:
    r = scoped.post("/v1/namespaces/victim/trainingjobs", json=CREATE[2],
                    headers={"Authorization": "Bearer team-a"})
    assert r.status_code == 403
    assert r.json() == {"error": "Forbidden", "field": "Authorization",
                        "message": "ci-a may not create trainingjobs in namespace victim"}


def test_lists_across_namespaces_need_an_all_namespace_grant(scoped: TestClient) -> None:
    headers = {"Authorization": "Bearer team-a"}
    assert scoped.get("/v1/trainingjobs", headers=headers).status_code == 403
    assert scoped.get("/v1/trainingjobs?namespace=a", headers=headers).status_code == 200
    assert scoped.get("/v1/accounting/jobs", headers=headers).status_code == 403
    assert scoped.get("/v1/accounting/jobs?namespace=a", headers=headers).status_code == 200
    assert scoped.get("/v1/accounting/namespaces", headers=headers).status_code == 403
    viewer = {"Authorization": "Bearer viewer"}
    assert scoped.get("/v1/trainingjobs", headers=viewer).status_code == 200
    assert scoped.get("/v1/accounting/namespaces", headers=viewer).status_code == 200


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("t verbs=get,watch", "unknown verb 'watch'"),  # patch is a verb (UltraServer writes)
        ("t namespace=a", "unknown field 'namespace'"),
        ("t verbs", "is not KEY=VALUE"),
    ],
)
def test_malformed_token_lines_are_startup_errors(line: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_line(line, where="token file t line 1")


def test_grant_scopes() -> None:
    grant = parse_line("t namespaces=a,b verbs=get", where="x").grant
    guard = Guard()
    assert grant.allows("get", "a") and grant.allows("get", "b")
    assert not grant.allows("get", None) and not grant.allows("create", "a")
    assert not guard.enabled
    assert Access("list", ("trainingjobs",), None).where() == "in all namespaces"
