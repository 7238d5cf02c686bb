"""`create_app(settings)`: the FastAPI application, its lifespan and its edges.

Startup order: the process answers /livez at once; bundles load and warm up in the background,
and /readyz turns 200 only when every bundle is loaded, warmed, and the service is not draining.
Any failure to load or warm up is logged with its reason (and the traceback when unexpected); under
`attention-mt serve` the process then exits with LOAD_FAILURE_EXIT_CODE (3). Response bodies name
bundles by name only; the log keeps paths.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.staticfiles import StaticFiles

from service.api import errors, libretranslate
from service.api.access_log import AccessLog, LoggedAccess
from service.api.auth import ApiKeyAuth, KeyRing
from service.api.direct import DirectRoutes
from service.api.docs import install_docs
from service.api.metrics import Metrics
from service.api.middleware import BodyLimit, RequestContext
from service.api.routes import STATIC_DIR, bodies, router
from service.api.security import HeaderLimit, SecurityHeaders
from service.engine import graph_fusion, native
from service.engine.catalog import Catalog, resolve_provider
from service.engine.errors import EngineError
from service.engine.invariance import check_batch_invariance
from service.engine.onnx_model import SessionConfig
from service.engine.requests import TranslateRequest
from service.engine.scheduler import SchedulerConfig
from service.engine.service import TranslationService
from service.engine.validation import Limits
from service.settings import Settings

log = logging.getLogger("attention_mt")
LOAD_FAILURE_EXIT_CODE = 3
SCHEDULER_FAILURE_EXIT_CODE = 4


def limits(settings: Settings) -> Limits:
    """The engine's request limits, from the HTTP settings (the engine never sees those)."""
    return Limits(
        max_texts=settings.max_texts,
        max_chars=settings.max_chars,
        max_beam_size=settings.max_beam_size,
        default_beam_size=settings.default_beam_size,
        length_penalty=settings.length_penalty,
        max_attention_cells=settings.max_attention_cells,
        max_pieces=settings.max_queue,
        unattended_threshold=settings.unattended_threshold,
    )


def scheduling(settings: Settings) -> SchedulerConfig:
    return SchedulerConfig(
        batching=settings.batching,
        max_batch=settings.max_batch_size,
        max_cohorts=settings.max_cohorts,
        max_delay_s=settings.max_queue_delay_ms / 1000,
        join_delay_s=settings.join_delay_ms / 1000,
        beam_join_delay_s=settings.beam_join_delay_ms / 1000,
        express_tokens=settings.express_tokens,
        max_queue=settings.max_queue,
        retry_after_s=settings.retry_after_s,
    )


def build_service(
    catalog: Catalog,
    settings: Settings,
    on_batch: Callable[[int], None] | None = None,
    on_fatal: Callable[[BaseException], None] | None = None,
) -> TranslationService:
    return TranslationService(catalog, limits(settings), scheduling(settings), on_batch, on_fatal)


def on_scheduler_failure(app: FastAPI) -> Callable[[BaseException], None]:
    """The scheduler's loop broke (it already failed every request it held and logged why): /readyz
    turns 503 from its health; under `attention-mt serve` the process drains and exits non-zero."""

    def fatal(exc: BaseException) -> None:
        app.state.fatal = True
        if app.state.exit_on_load_failure:
            os.kill(os.getpid(), signal.SIGTERM)

    return fatal


def session_config(settings: Settings) -> SessionConfig:
    return SessionConfig(
        provider=resolve_provider(settings.provider),
        intra_op_threads=settings.intra_op_threads,
        inter_op_threads=settings.inter_op_threads,
        spinning=settings.intra_op_spinning,
        enable_mem_arena=settings.enable_mem_arena,
        enable_mem_pattern=settings.enable_mem_pattern,
        fuse_quantization=settings.fuse_quantization,
        fuse_attention=settings.fuse_attention,
        heap_reuse_bytes=settings.heap_reuse_bytes,
        # threads that spin anyway share one pool, so one model's idle threads never spin on the cores
        # another model's are running on (all of a server's sessions come from these settings)
        shared_thread_pool=settings.intra_op_spinning and settings.intra_op_threads != 1,
    )


_ABSOLUTE_PATH = re.compile(r"(?<![\w.-])/(?:[^\s/'\"()]+/)+([^\s/'\"()]*)")


def public_reason(exc: BaseException, bundles: Path) -> str:
    """Why loading failed, for response bodies: bundles named by name, never a filesystem path.

    The log line keeps the full message, paths and traceback."""
    if not isinstance(exc, EngineError):  # its text (an OSError's) often holds a path
        return f"model load failed ({type(exc).__name__}); the server log has the details"
    message = exc.message
    for root in {str(bundles), str(bundles.absolute()), str(bundles.resolve())}:
        message = message.replace(root + os.sep, "").replace(root, bundles.name)
    return _ABSOLUTE_PATH.sub(r"\1", message)  # any path left (outside the bundle directory)


def fail_startup(app: FastAPI, exc: Exception) -> None:
    """Log why startup failed; under `attention-mt serve`, exit with LOAD_FAILURE_EXIT_CODE."""
    settings: Settings = app.state.settings
    app.state.load_error = public_reason(exc, settings.bundles)
    if isinstance(exc, EngineError):  # a known problem: its message says what to fix
        log.error("model load failed: %s", exc.message, extra={"event": "load_failed"})
    else:  # a bug or an environment fault: keep the traceback
        log.error("model load failed: %s: %s", type(exc).__name__, exc, exc_info=exc, extra={"event": "load_failed"})
    if app.state.exit_on_load_failure:
        app.state.access_log.flush()  # the requests answered 503 while loading
        logging.shutdown()  # flush the line above: os._exit skips every handler
        os._exit(LOAD_FAILURE_EXIT_CODE)  # fail fast; an orchestrator restarts or alerts


async def load_and_warm(app: FastAPI) -> None:
    """Load and warm up; any failure is logged and (under `serve`) ends the process, never silently."""
    try:
        await _load_and_warm(app)
    except Exception as exc:  # not CancelledError: a shutdown during loading is no failure
        fail_startup(app, exc)


async def _load_and_warm(app: FastAPI) -> None:
    """Load every bundle (off the event loop), start batching, warm each model, then be ready."""
    settings: Settings = app.state.settings
    catalog = await asyncio.to_thread(Catalog.load, settings.bundles, session_config(settings))
    metrics: Metrics = app.state.metrics
    metrics.describe_models(catalog)
    service = build_service(catalog, settings, metrics.batch_size.observe, on_scheduler_failure(app))
    service.scheduler.start()
    app.state.service = service
    metrics.depth = lambda: service.scheduler.depth
    for name in sorted(catalog.models):  # first runs allocate and optimise
        await service.translate(TranslateRequest(texts=[settings.warmup_text], model=name, beam_size=1))
    if settings.check_batch_invariance:
        app.state.invariance = await checked_invariance(service, settings.warmup_text, metrics)
    if app.state.on_ready is not None:
        app.state.on_ready()
    app.state.ready = True
    kernels = native.available() or "numpy (the C kernels are not built)"
    log.info("ready: %s; search kernels: %s; fused operators: %s", ", ".join(sorted(catalog.models)), kernels,
             fused_operators(catalog), extra={"event": "ready"})  # fmt: skip


def fused_operators(catalog: Catalog) -> str:
    """What graph_fusion fused in each model's graphs, for the ready log line: an operator can see an
    install without the operator library, or a setting that turned it off."""
    fused = {name: t.model.fused for name, t in sorted(catalog.models.items()) if t.model.fused}
    if not fused:
        return "none" if graph_fusion.library() else "none (the operator library is not built)"
    return "; ".join(f"{name} ({_fused_nodes(roles)})" for name, roles in fused.items())


def _fused_nodes(roles: dict[str, dict[str, int]]) -> str:
    """One model's, e.g. "encoder: 24 RowDequant, 13 RowQuant / decoder: 3 CacheAttention, ..."."""
    return " / ".join(f"{role}: " + ", ".join(f"{n} {op}" for op, n in ops.items()) for role, ops in roles.items())


async def checked_invariance(service: TranslationService, text: str, metrics: Metrics) -> dict[str, bool]:
    """Each model's batch invariance on this CPU (service/engine/invariance.py), logged and exported."""
    found: dict[str, bool] = {}
    for name in sorted(service.catalog.models):
        try:
            check = await check_batch_invariance(service.translate, name, text)
        except EngineError as exc:  # MT_WARMUP_TEXT made probes the limits refuse: unchecked, said so
            log.warning("%s: batch invariance not checked: %s", name, exc.message, extra={"event": "batch_invariance"})
            continue
        found[name] = check.invariant
        metrics.batch_invariant.labels(name).set(int(check.invariant))
        if check.invariant:
            log.info("%s: batch-invariant on this CPU (%d translations, alone and batched)", name, check.texts,
                     extra={"event": "batch_invariance"})  # fmt: skip
        else:
            log.warning(
                "%s: NOT batch-invariant on this CPU: %d of %d translations changed when batched, so a text's "
                "translation may depend on what it is batched with",
                name, check.changed, check.texts, extra={"event": "batch_invariance"},
            )  # fmt: skip
    return found


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
            await app.state.service.scheduler.stop()


def create_app(
    settings: Settings,
    exit_on_load_failure: bool = False,
    on_ready: Callable[[], None] | None = None,
    access_log: AccessLog | None = None,
) -> FastAPI:
    """`exit_on_load_failure`: the process is the server's (`attention-mt serve`); `on_ready`: called
    once, after the models are loaded and warmed up, before /readyz turns 200; `access_log`: where
    each request's line goes (default: Python's logging)."""
    docs = settings.docs
    app = FastAPI(
        title="attention-mt",
        summary="Translation that shows its attention",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,  # served by install_docs, from local assets: /docs works without internet
        redoc_url=None,
        openapi_url="/openapi.json" if docs else None,
    )
    app.state.settings = settings
    app.state.metrics = Metrics.create()
    app.state.service = None
    app.state.ready = False
    app.state.draining = False
    app.state.fatal = False
    app.state.load_error = None
    app.state.invariance = {}  # model -> batch-invariant on this CPU, once checked at startup
    app.state.exit_on_load_failure = exit_on_load_failure
    app.state.on_ready = on_ready
    app.state.access_log = access_log or LoggedAccess()
    errors.install(app)
    app.include_router(bodies)  # first: the routes every request of the load takes
    app.include_router(router)
    app.include_router(libretranslate.router)
    if docs:
        install_docs(app)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.add_middleware(DirectRoutes, routes=bodies.routes)  # innermost: the JSON body routes, past the edge's checks
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.state.keyring = KeyRing(settings.api_keys, settings.rate_limit_per_minute)
    app.add_middleware(ApiKeyAuth, ring=app.state.keyring)
    if settings.cors_origins:  # none by default: browsers on other origins are refused, at no cost a request
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["content-type", "x-request-id", "x-api-key"],
        )
    app.add_middleware(HeaderLimit, max_bytes=settings.max_header_bytes)
    app.add_middleware(SecurityHeaders)  # on every answer, refusals included
    app.add_middleware(RequestContext, metrics=app.state.metrics, access=app.state.access_log)
    return app
