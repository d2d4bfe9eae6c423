"""The live dashboard: one static page at `/` that polls this API's own `/v1` endpoints.

The page holds no data of its own: every figure it shows comes from `/v1/ultraservers` and
the job lists, fetched with the visitor's bearer token, so it sees exactly what that token
may read through the API (a token scoped to one namespace sees its own jobs by name and
other tenants' chips only as "another tenant"). The one endpoint added here,
`/dashboard/config`, tells the page what it cannot learn from `/v1` alone: whether the
server asks for tokens, which namespaces the caller's static token may list (so a scoped
token needs no namespace typed in), and each hardware profile's servers and chips per
UltraServer (to draw the chip grid). Why plain HTML, CSS and JavaScript: docs/dashboard.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from ultraplane.api.access.auth import Credentials, Guard

from ultraplane.hardware.profiles import load_profile, profile_names

ASSETS = Path(__file__).resolve().parents[1] / "dashboard"  # api/dashboard/, beside routers/
# The page loads only its own files and talks only to this server; no inline script.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; frame-ancestors 'self'; form-action 'self'")
ASSETS_URL = "/dashboard/static"
POLL_SECONDS = 2.0

router = APIRouter(include_in_schema=False)


def _profiles() -> dict[str, dict[str, int]]:
    shapes = {}
    for name in profile_names():
        profile = load_profile(name)
        shapes[name] = {"servers": profile.servers_per_ultraserver,
                        "chipsPerServer": profile.chips_per_server}
    return shapes


@router.get("/")
async def dashboard() -> FileResponse:
    """The dashboard page (static; its script fetches everything it shows)."""
    return FileResponse(ASSETS / "index.html", media_type="text/html",
                        headers={"Cache-Control": "no-cache", "Content-Security-Policy": CSP})


@router.get("/dashboard/config")
async def config(request: Request, credentials: Credentials) -> JSONResponse:
    """What the page needs besides `/v1`: the auth mode, the caller's namespaces, profiles.

    With tokens configured, a missing or unknown token is the API's own 401, so the page
    asks for one. `namespaces` is the static token's namespace list, or null when the token
    reads every namespace or is a cluster user (the page then lists across namespaces).
    """
    guard: Guard = request.app.state.guard
    auth: dict[str, Any] = {"required": guard.enabled, "caller": None, "namespaces": None}
    if guard.enabled:
        # A cluster user's TokenReview is a network call: off the event loop.
        caller = (guard.authenticate(credentials) if guard.reviews is None
                  else await run_in_threadpool(guard.authenticate, credentials))
        auth["caller"] = caller.name
        if caller.grant is not None and caller.grant.namespaces is not None:
            auth["namespaces"] = sorted(caller.grant.namespaces)
    body = {"auth": auth, "backend": request.app.state.backend.name,
            "pollSeconds": POLL_SECONDS, "profiles": request.app.state.dashboard_profiles}
    return JSONResponse(body, headers={"Cache-Control": "no-store"})


def install(app: FastAPI) -> None:
    """Serve the page, its config and its assets (HTML, CSS, JS: no CDN, nothing to build)."""
    app.state.dashboard_profiles = _profiles()
    app.include_router(router)
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS), name="dashboard-assets")
