"""`/docs` and `/redoc` with no internet: every asset from the package, rendered in Chromium.

The HTML of both pages may name no host but the server itself; then a real Chromium that may
reach only loopback (browsers.Offline) renders Swagger UI's operations and ReDoc's
reference, and the OpenAPI document's request examples appear in Swagger UI.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.browsers import chromium, offline_page, served

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

URL_IN_HTML = re.compile(r"""(?:src|href|url)\s*[=:(]\s*["']?([^"' )>]+)""", re.IGNORECASE)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with served(tmp_path_factory.mktemp("docs"), "--no-demo", "--fleet", "trn3-gen2:2") as url:
        yield url


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_html_references_no_other_host(server: str, page: str) -> None:
    html = httpx.get(server + page, timeout=10).text
    assert "<html" in html.lower()
    linked = URL_IN_HTML.findall(html)
    assert linked, f"{page} links no asset at all: {html[:300]}"
    outside = [u for u in linked if re.match(r"^(?:[a-z]+:)?//", u, re.IGNORECASE)]
    assert not outside, f"{page} links other hosts: {outside}"
    assert not re.search(r"https?://", html), f"{page} names a URL: {html}"
    for asset in linked:
        if asset.startswith("/"):
            got = httpx.get(server + asset, timeout=10)
            assert got.status_code == 200, f"{page} links {asset}: HTTP {got.status_code}"
            assert len(got.content) > 0


def test_swagger_ui_renders_offline_with_request_examples(server: str, browser: Any) -> None:
    with offline_page(browser, "docs-swagger-ui", full_page=False) as (page, offline, errors):
        page.goto(f"{server}/docs")
        page.wait_for_selector(".swagger-ui .opblock", timeout=30_000)
        operations = page.locator(".swagger-ui .opblock").count()
        paths = httpx.get(f"{server}/openapi.json", timeout=10).json()["paths"]
        served_ops = sum(1 for item in paths.values() for m in item
                         if m in ("get", "put", "post", "delete", "patch"))
        assert operations == served_ops
        # The create operation shows its request example (from the OpenAPI document).
        create = page.locator(".opblock-post", has_text="/v1/namespaces/{namespace}/trainingjobs")
        create.first.locator(".opblock-summary").click()
        page.wait_for_selector(".opblock-body .body-param__example, .opblock-body .microlight",
                               timeout=10_000)
        body = create.first.locator(".opblock-body").inner_text()
        assert '"chips"' in body and '"metadata"' in body
        assert offline.attempts == [], f"Swagger UI tried to reach: {offline.attempts}"
        assert not [e for e in errors if "Failed to load resource" not in e], errors


def test_redoc_renders_offline(server: str, browser: Any) -> None:
    with offline_page(browser, "docs-redoc", full_page=False) as (page, offline, errors):
        page.goto(f"{server}/redoc")
        page.wait_for_selector(".api-content h1", timeout=60_000)
        assert "Ultraplane API" in page.locator(".api-content h1").first.inner_text()
        assert page.get_by_text("/v1/ultraservers").count() > 0
        assert offline.attempts == [], f"ReDoc tried to reach: {offline.attempts}"
        # The one other host the bundle names (its vendor's logo) is refused by the page's
        # Content-Security-Policy before any request: that refusal is the only error.
        refused = [e for e in errors if "Content Security Policy" in e]
        assert all("cdn.redoc.ly/redoc/logo-mini.svg" in e for e in refused), refused
        assert not [e for e in errors if e not in refused], errors


def test_assets_are_package_files(server: str) -> None:
    """The bundles are the installed package's files, byte for byte: nothing fetched later."""
    from ultraplane.api.routers.docs import assets_dir

    for name in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js"):
        local = Path(assets_dir(), name).read_bytes()
        assert httpx.get(f"{server}/docs-assets/{name}", timeout=10).content == local
