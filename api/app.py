"""The FastAPI app factory: one engine, one backend, one metrics registry per app.

Nothing is created at import time, so tests (and the benchmark) can build as
many independent apps as they like, each on its own database.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from ultraplane.api import errors, openapi
from ultraplane.api.access.auth import Guard, load_tokens
from ultraplane.api.backends import make_backend
from ultraplane.api.guards.bodylimits import BodySizeLimit, SingleQueryValues
from ultraplane.api.guards.ratelimits import RateLimits
from ultraplane.api.metrics import Metrics, MetricsMiddleware
from ultraplane.api.routers import dashboard, docs
from ultraplane.api.routers.accounting import router as accounting_router
from ultraplane.api.routers.explanations import router as explanations_router
from ultraplane.api.routers.health import router as health_router
from ultraplane.api.routers.histories import router as histories_router
from ultraplane.api.routers.jobs import inference_router, training_router
from ultraplane.api.routers.placements import router as placements_router
from ultraplane.api.routers.queues import router as queues_router
from ultraplane.api.routers.scales import router as scales_router
from ultraplane.api.routers.ultraservers import router as ultraservers_router
from ultraplane.api.settings import Settings
from ultraplane.api.store import make_engine, migrate

from ultraplane import __version__

DESCRIPTION = """Topology-aware gang scheduling onto AWS Trainium UltraServers.

Jobs are the `ultraplane.dev/v1alpha1` custom resources; their specs here are
validated by the same models as the CRDs. Errors are `{"error", "field", "message"}`.
Once tokens or TokenReview are configured, job and accounting requests need
`Authorization: Bearer <token>` granting the verb in the namespace (docs/api.md, Auth)."""


def create_app(
    settings: Settings | None = None, *, clock: Callable[[], float] | None = None,
    background_ticks: bool = True,
) -> FastAPI:
    """Build the app; the store is migrated now, the backend starts with the app's lifespan.

    `clock` (wall seconds) is injected by tests to drive the embedded fleet's simulated time;
    with `background_ticks=False` the embedded fleet ticks only when `backend.tick()` is
    called (a create or a patch then wakes nothing), so such a test decides every tick.
    """
    settings = settings or Settings()
    engine = make_engine(settings.db)
    migrate(engine)
    backend = make_backend(settings, engine, clock=clock, background_ticks=background_ticks)
    reviews = None
    if settings.backend == "kubernetes" and settings.token_review:
        from ultraplane.api.access.kubereviews import KubeReviews

        reviews = KubeReviews(getattr(backend, "api_client", None))
    guard = Guard(load_tokens(settings), protect_reads=settings.api_protect_reads, reviews=reviews)
    metrics = Metrics()
    metrics.watch_fleet(backend.fleet_summary)

    users = [0]  # test clients may nest lifespans; the backend starts once, stops with the last

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if users[0] == 0:
            backend.start()
            # Everything loaded so far (topology, allocator indexes, profiles) lives as long
            # as the process: moving it out of the collector's sight keeps full collections
            # short, which was the main source of dry-run latency tails.
            gc.collect()
            gc.freeze()
        users[0] += 1
        try:
            yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                backend.stop()
                engine.dispose()

    app = FastAPI(
        title="Ultraplane API",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        dependencies=[Depends(openapi.reject_unknown_query)],
        docs_url=None,  # served from the package by routers/docs: no CDN
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.backend = backend
    app.state.guard = guard
    app.state.metrics = metrics
    errors.install(app)
    for router in (health_router, ultraservers_router, training_router, inference_router,
                   placements_router, accounting_router, explanations_router, queues_router,
                   scales_router, histories_router):
        app.include_router(router)
    openapi.install(app, guard, kubernetes=settings.backend == "kubernetes")
    docs.install(app)
    dashboard.install(app)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(SingleQueryValues)
    app.add_middleware(RateLimits, limits=settings.rate_limits())
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app
