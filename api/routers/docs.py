"""`/docs` (Swagger UI) and `/redoc` served entirely from the installed packages.

FastAPI's own pages load Swagger UI, ReDoc, a favicon and Google Fonts from CDNs, so they
are blank on a machine without internet, and air-gapped Trainium clusters are common. The
same pages are rendered here by FastAPI's page builders, pointed at the copies of the
Swagger UI 5 and ReDoc 2 bundles that the `fastapi-offline` wheel ships (MIT, a runtime
dependency whose only requirement is FastAPI; its `FastAPIOffline` app factory is not used,
only its static files). Swagger UI's validator badge, which calls an external service, is
turned off, and both pages carry a Content-Security-Policy that lets the browser load nothing
from another host: ReDoc's bundle still names one image on its vendor's CDN (the "API docs
by Redocly" logo), which the policy refuses before any request is made.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS_URL = "/docs-assets"
OAUTH2_REDIRECT_URL = "/docs/oauth2-redirect"
SWAGGER_PARAMETERS = {"validatorUrl": None, "persistAuthorization": True,
                      "displayRequestDuration": True}


# Inline scripts and styles: FastAPI's Swagger UI page starts the bundle from an inline
# script, and both bundles inject their styles; blob: workers are ReDoc's search.
CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; "
       "connect-src 'self'; frame-ancestors 'self'")


def _local(page: HTMLResponse) -> HTMLResponse:
    page.headers["Content-Security-Policy"] = CSP
    return page


def assets_dir() -> Path:
    """The folder of the vendored Swagger UI and ReDoc bundles inside `fastapi_offline`."""
    return Path(str(files("fastapi_offline") / "static"))


def _root(request: Request) -> str:
    return str(request.scope.get("root_path") or "")


def docs_router(app: FastAPI) -> APIRouter:
    """The two pages and Swagger UI's OAuth2 redirect; `app` gives the title and schema URL."""
    router = APIRouter(include_in_schema=False)

    @router.get("/docs", response_class=HTMLResponse)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = _root(request)
        return _local(get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
            oauth2_redirect_url=f"{root}{OAUTH2_REDIRECT_URL}",
            swagger_ui_parameters=SWAGGER_PARAMETERS))

    @router.get(OAUTH2_REDIRECT_URL, response_class=HTMLResponse)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @router.get("/redoc", response_class=HTMLResponse)
    async def redoc(request: Request) -> HTMLResponse:
        root = _root(request)
        return _local(get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS_URL}/favicon.png", with_google_fonts=False))

    return router


def install(app: FastAPI) -> None:
    """Serve the pages and their assets; the app must be built with docs_url=redoc_url=None."""
    app.include_router(docs_router(app))
    app.mount(ASSETS_URL, StaticFiles(directory=assets_dir()), name="docs-assets")
