"""The routes. Each handler is thin: parse, call the service, answer."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from fastapi import APIRouter, Request, Response
from fastapi.responses import FileResponse, JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.api.errors import error_response
from service.api.schemas import (
    ErrorBody,
    IntrospectBody,
    IntrospectResponse,
    SvgBody,
    TranslateBody,
    TranslateResponse,
)
from service.api.svg import heatmap_svg
from service.engine.catalog import Catalog
from service.engine.errors import DeadlineExceeded, NotReady
from service.engine.requests import AttentionOptions, IntrospectRequest, TranslateRequest
from service.engine.service import TranslationService

T = TypeVar("T")
router = APIRouter()
STATIC_DIR = Path(__file__).parent / "static"
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (400, 401, 413, 415, 422, 429, 503, 504)
}


def _service(request: Request) -> TranslationService:
    service: TranslationService | None = request.app.state.service
    if service is None:
        raise NotReady(request.app.state.load_error or "models are loading; retry shortly")
    return service


async def _within_deadline(request: Request, timeout_ms: int | None, work: Awaitable[T]) -> T:
    """Await `work` within the request's deadline: the body's timeout_ms, capped by the setting."""
    limit = request.app.state.settings.request_timeout_s
    seconds = min(limit, timeout_ms / 1000) if timeout_ms else limit
    try:
        return await asyncio.wait_for(work, seconds)
    except TimeoutError:
        raise DeadlineExceeded(
            f"the request did not finish within its deadline of {seconds * 1000:.0f} ms",
            field="timeout_ms",
            limit=round(limit * 1000),
        ) from None


def _count_tokens(request: Request, result: dict[str, Any]) -> None:
    tokens = request.app.state.metrics.tokens
    for t in result["translations"]:
        tokens.labels("in").inc(len(t["source_tokens"]))
        tokens.labels("out").inc(len(t["target_tokens"]))


@router.post("/v1/translate", response_model=TranslateResponse, responses=ERRORS, tags=["translate"])
async def translate(body: TranslateBody, request: Request) -> JSONResponse:
    """Translate one text or a batch, with the attention of every output token."""
    started = time.perf_counter()
    a = body.attention
    job = TranslateRequest(
        texts=[body.q] if isinstance(body.q, str) else body.q,
        single=isinstance(body.q, str),
        model=body.model,
        source=body.source,
        target=body.target,
        beam_size=body.beam_size,
        n_best=body.n_best,
        max_output_tokens=body.max_output_tokens,
        attention=AttentionOptions(a.granularity, a.format, a.top_k, a.layer, a.heads),
    )
    result = await _within_deadline(request, body.timeout_ms, _service(request).translate(job))
    request.app.state.metrics.inference.labels("request").observe(time.perf_counter() - started)
    _count_tokens(request, result)
    return JSONResponse(result)


def introspect_request(body: IntrospectBody, **changes: Any) -> IntrospectRequest:
    """The engine request of a /v1/attention body (the SVG route narrows it with `changes`)."""
    fields = {f.name: getattr(body, f.name) for f in dataclasses.fields(IntrospectRequest)}
    return IntrospectRequest(**{**fields, **changes})


@router.post("/v1/attention", response_model=IntrospectResponse, responses=ERRORS, tags=["introspect"])
async def attention(body: IntrospectBody, request: Request) -> JSONResponse:
    """Every layer and head of one translation; score your own translation with forced_target."""
    job = introspect_request(body)
    return JSONResponse(await _within_deadline(request, body.timeout_ms, _service(request).introspect(job)))


@router.post(
    "/v1/attention/svg",
    response_class=Response,
    responses={200: {"content": {"image/svg+xml": {}}}, **ERRORS},
    tags=["introspect"],
)
async def attention_svg(body: SvgBody, request: Request) -> Response:
    """A self-contained SVG heatmap of one layer's cross-attention (one head or the mean)."""
    service = _service(request)
    translator = service.resolve(body.model, body.source, body.target)
    layers = translator.manifest.architecture.layers
    layer = body.layer + layers if body.layer < 0 else body.layer
    heads = None if body.head == "mean" else [body.head]
    job = introspect_request(body, model=translator.manifest.name, layers=[layer], heads=heads, self_attention=False)
    result = await _within_deadline(request, body.timeout_ms, service.introspect(job))
    matrix = np.asarray(result["cross_attention"][0]).mean(axis=0).tolist()  # (T, S) over the chosen heads
    head = "mean of heads" if body.head == "mean" else f"head {body.head}"
    title = f"{result['model']}: {result['text']} (layer {layer}, {head})"
    labels = [[t["text"] for t in result[k]] for k in ("source_tokens", "target_tokens")]
    svg = heatmap_svg(labels[0], labels[1], matrix, title)
    return Response(svg, media_type="image/svg+xml")


def describe(name: str, catalog: Catalog) -> dict[str, Any]:
    m = catalog.models[name].manifest
    return {
        "name": m.name,
        "source": m.source_lang,
        "target": m.target_lang,
        "family": m.architecture.family,
        "attention": m.architecture.attention,
        "layers": m.architecture.layers,
        "heads": m.architecture.heads,
        "parameters": m.architecture.parameters,
        "quantization": m.quantization.model_dump(),
        "provider": catalog.provider,
        "limits": m.limits.model_dump(),
        "parity": m.parity.model_dump(),
        "quality": [q.model_dump() for q in m.quality],
        "attention_view": m.attention_view.model_dump(),
        "search": m.search.model_dump(),
        "tokenizer": {"kind": m.tokenizers.kind, "target_token": m.tokenizers.target_token},
        "origin": m.provenance.origin,
        "default_for": [f"{s}-{t}" for (s, t), n in catalog.defaults.items() if n == name],
    }


@router.get("/v1/models", tags=["models"])
async def models(request: Request) -> dict[str, Any]:
    """The loaded models, and the default model of each language pair."""
    catalog: Catalog = _service(request).catalog
    return {
        "models": [describe(name, catalog) for name in sorted(catalog.models)],
        "defaults": {f"{s}-{t}": name for (s, t), name in sorted(catalog.defaults.items())},
    }


@router.get("/v1/models/{name}", tags=["models"], responses={404: {"model": ErrorBody}})
async def model(name: str, request: Request) -> Any:
    """One model's languages, architecture, quantization, parity and quality figures."""
    catalog: Catalog = _service(request).catalog
    if name not in catalog.models:
        return error_response(
            404, "unknown_model", f"no model named {name!r}; loaded: {', '.join(sorted(catalog.models))}", "name"
        )
    return describe(name, catalog)


@router.get("/", include_in_schema=False)
async def page() -> FileResponse:
    """The web page: translate and see the attention."""
    return FileResponse(STATIC_DIR / "index.html")


@router.get("/livez", tags=["health"])
async def livez() -> dict[str, str]:
    """Answers whenever the process is up; never depends on the models."""
    return {"status": "alive"}


@router.get("/readyz", tags=["health"], responses={503: {"model": ErrorBody}})
async def readyz(request: Request) -> Any:
    """200 once every bundle is loaded and warmed up, and while not draining."""
    state = request.app.state
    if state.draining:
        return error_response(503, "draining", "the service is shutting down", headers={"Retry-After": "1"})
    if not state.ready:
        return error_response(503, "not_ready", "models are loading or warming up", headers={"Retry-After": "1"})
    return {"status": "ready"}


@router.get("/metrics", tags=["health"])
async def metrics(request: Request) -> Response:
    """Prometheus metrics."""
    m = request.app.state.metrics
    m.queue_depth.set(_service(request).batcher.depth)
    return Response(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)
