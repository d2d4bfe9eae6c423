"""What the real app serves besides `/v1`: the dashboard page and its config, the offline
docs pages, and the request examples of the OpenAPI document (each one accepted by the app).

Fleet: 8 Gen2 UltraServers (the default), embedded backend, SQLite in the test's own folder.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from ultraplane.api.app import create_app
from ultraplane.api.openapi import REQUEST_EXAMPLES
from ultraplane.api.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def client_for(tmp_path: Path, **settings: Any) -> Iterator[TestClient]:
    app = create_app(Settings(db=f"sqlite:///{tmp_path / 'api.db'}", **settings))
    with TestClient(app) as client:
        yield client


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    yield from client_for(tmp_path)


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[TestClient]:
    tokens = tmp_path / "tokens"
    tokens.write_text("admin-secret name=admin\n"
                      "team-a-secret namespaces=team-b,team-a verbs=get,list name=team-a\n")
    yield from client_for(tmp_path, token_file=str(tokens))


def test_root_is_the_dashboard_page_with_package_assets(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "https://" not in page.text and "http://" not in page.text
    for asset in ("dashboard/static/app.js", "dashboard/static/services.js",
                  "dashboard/static/app.css",
                  "dashboard/static/favicon.svg"):
        assert asset in page.text
        got = client.get("/" + asset)
        assert got.status_code == 200 and got.content
    assert client.get("/dashboard/static/nope.js").status_code == 404


def test_config_without_tokens_shows_everything(client: TestClient) -> None:
    body = client.get("/dashboard/config").json()
    assert body["auth"] == {"required": False, "caller": None, "namespaces": None}
    assert body["backend"] == "embedded"
    assert body["profiles"]["trn3-gen2"] == {"servers": 36, "chipsPerServer": 4}
    assert body["profiles"]["trn2"] == {"servers": 4, "chipsPerServer": 16}


def test_config_with_tokens_names_the_callers_namespaces(guarded: TestClient) -> None:
    missing = guarded.get("/dashboard/config")
    assert missing.status_code == 401
    assert missing.json()["message"] == "a bearer token is required"
    wrong = guarded.get("/dashboard/config", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    scoped = guarded.get("/dashboard/config", headers={"Authorization": "Bearer team-a-secret"})
    assert scoped.json()["auth"] == {"required": True, "caller": "team-a",
                                     "namespaces": ["team-a", "team-b"]}
    admin = guarded.get("/dashboard/config", headers={"Authorization": "Bearer admin-secret"})
    assert admin.json()["auth"] == {"required": True, "caller": "admin", "namespaces": None}


def test_dashboard_is_not_in_the_openapi_document(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert not [p for p in paths if p == "/" or p.startswith(("/dashboard", "/docs"))]


@pytest.mark.parametrize("page,asset", [("/docs", "/docs-assets/swagger-ui-bundle.js"),
                                        ("/redoc", "/docs-assets/redoc.standalone.js")])
def test_docs_pages_load_their_assets_from_this_server(client: TestClient, page: str,
                                                       asset: str) -> None:
    html = client.get(page).text
    assert f'src="{asset}"' in html
    assert "cdn." not in html and "fonts.googleapis" not in html and "://" not in html
    assert client.get(asset).status_code == 200


def test_swagger_ui_never_calls_the_external_validator(client: TestClient) -> None:
    assert '"validatorUrl": null' in client.get("/docs").text


def test_every_request_example_is_in_the_document_and_accepted(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    assert REQUEST_EXAMPLES
    for (method, path), examples in REQUEST_EXAMPLES.items():
        media = document["paths"][path][method]["requestBody"]["content"]["application/json"]
        assert media["examples"] == examples
        for name, example in examples.items():
            answer = client.request(method.upper(), path.replace("{namespace}", "examples"),
                                    json=example["value"])
            assert answer.status_code in (200, 201), f"{path} example {name}: {answer.text}"


def test_job_examples_are_the_repositorys_example_manifests() -> None:
    """One source: the examples in the docs are the manifests users apply with kubectl."""
    manifests = {}
    for path in ROOT.glob("examples/*job*.yaml"):
        doc = yaml.safe_load(path.read_text())
        manifests[doc["metadata"]["name"]] = doc["spec"]
    shown = [e["value"] for (_, p), ex in REQUEST_EXAMPLES.items() if "jobs" in p
             for e in ex.values()]
    assert len(shown) == 3
    for body in shown:
        assert body["spec"] == manifests[body["metadata"]["name"]]
