"""`create_app(settings)`: the FastAPI application, its lifespan and its edges.

Startup order: the process answers /livez at once; bundles load and warm up in the background,
and /readyz turns 200 only when every bundle is loaded, warmed, and the service is not draining.
A bundle that fails to load is logged in one line naming the file and the reason; under
`attention-mt serve` the process then exits non-zero.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.staticfiles import StaticFiles

from service.api import errors
from service.api.auth import ApiKeyAuth
from service.api.metrics import Metrics
from service.api.middleware import BodyLimit, RequestContext
from service.api.routes import STATIC_DIR, router
from service.engine.catalog import Catalog, resolve_provider
from service.engine.errors import EngineError
from service.engine.onnx_model import SessionConfig
from service.engine.requests import TranslateRequest
from service.engine.service import TranslationService
from service.settings import Settings

log = logging.getLogger("attention_mt")
LOAD_FAILURE_EXIT_CODE = 3


def session_config(settings: Settings) -> SessionConfig:
    return SessionConfig(
        provider=resolve_provider(settings.provider),
        intra_op_threads=settings.intra_op_threads,
        inter_op_threads=settings.inter_op_threads,
        enable_mem_arena=settings.enable_mem_arena,
        enable_mem_pattern=settings.enable_mem_pattern,
    )


async def load_and_warm(app: FastAPI) -> None:
    """Load every bundle (off the event loop), start batching, warm each model, then be ready."""
    settings: Settings = app.state.settings
    try:
        catalog = await asyncio.to_thread(Catalog.load, settings.bundles, session_config(settings))
    except EngineError as exc:
        app.state.load_error = exc.message
        log.error("model load failed: %s", exc.message, extra={"event": "load_failed"})
        if app.state.exit_on_load_failure:
            logging.shutdown()
            os._exit(LOAD_FAILURE_EXIT_CODE)  # fail fast; an orchestrator restarts or alerts
        return
    metrics: Metrics = app.state.metrics
    metrics.describe_models(catalog)
    service = TranslationService(catalog, settings, on_batch=metrics.batch_size.observe)
    service.batcher.start()
    app.state.service = service
    for name in sorted(catalog.models):  # first runs allocate and optimise
        await service.translate(TranslateRequest(texts=[settings.warmup_text], model=name, beam_size=1))
    app.state.ready = True
    log.info("ready: %s", ", ".join(sorted(catalog.models)), extra={"event": "ready"})


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    loading = asyncio.create_task(load_and_warm(app))
    try:
        yield
    finally:
        app.state.draining = True
        loading.cancel()
        await asyncio.gather(loading, return_exceptions=True)
        if app.state.service is not None:
            await app.state.service.batcher.stop()


def create_app(settings: Settings, exit_on_load_failure: bool = False) -> FastAPI:
    docs = settings.docs
    app = FastAPI(
        title="attention-mt",
        summary="Translation that shows its attention",
        version="0.1.0",
        lifespan=lifespan,
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
        openapi_url="/openapi.json" if docs else None,
    )
    app.state.settings = settings
    app.state.metrics = Metrics.create()
    app.state.service = None
    app.state.ready = False
    app.state.draining = False
    app.state.load_error = None
    app.state.exit_on_load_failure = exit_on_load_failure
    errors.install(app)
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(ApiKeyAuth, keys=settings.api_keys, per_minute=settings.rate_limit_per_minute)
    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(settings.cors_origins),  # none by default: browsers on other origins are refused
        allow_methods=["GET", "POST"],
        allow_headers=["content-type", "x-request-id", "x-api-key"],
    )
    app.add_middleware(RequestContext, metrics=app.state.metrics)
    return app
