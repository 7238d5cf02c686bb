"""`create_app(settings)`: the FastAPI application, its lifespan and its edges."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from service.api import errors
from service.api.metrics import Metrics
from service.api.middleware import BodyLimit, CountRequests
from service.api.routes import STATIC_DIR, router
from service.engine.catalog import Catalog, resolve_provider
from service.engine.onnx_model import SessionConfig
from service.engine.requests import TranslateRequest
from service.engine.service import TranslationService
from service.settings import Settings

log = logging.getLogger("attention_mt")


def session_config(settings: Settings) -> SessionConfig:
    return SessionConfig(
        provider=resolve_provider(settings.provider),
        intra_op_threads=settings.intra_op_threads,
        inter_op_threads=settings.inter_op_threads,
        enable_mem_arena=settings.enable_mem_arena,
        enable_mem_pattern=settings.enable_mem_pattern,
    )


async def warm_up(app: FastAPI) -> None:
    """One translation per model before /readyz says ready (first runs allocate and optimise)."""
    service: TranslationService = app.state.service
    for name in sorted(service.catalog.models):
        await service.translate(TranslateRequest(texts=[app.state.settings.warmup_text], model=name, beam_size=1))
    app.state.ready = True
    log.info("ready: %s", ", ".join(sorted(service.catalog.models)))


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    catalog = Catalog.load(settings.bundles, session_config(settings))  # a bad bundle stops startup here
    metrics: Metrics = app.state.metrics
    metrics.describe_models(catalog)
    service = TranslationService(catalog, settings, on_batch=metrics.batch_size.observe)
    app.state.service = service
    service.batcher.start()
    warming = asyncio.create_task(warm_up(app))
    try:
        yield
    finally:
        app.state.draining = True
        warming.cancel()
        await service.batcher.stop()


def create_app(settings: Settings) -> FastAPI:
    app = FastAPI(
        title="attention-mt",
        summary="Translation that shows its attention",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.metrics = Metrics.create()
    app.state.ready = False
    app.state.draining = False
    errors.install(app)
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(CountRequests, metrics=app.state.metrics)
    return app
