"""The routes. Each handler is thin: parse, call the service, answer."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any, TypeVar

from fastapi import APIRouter, Request, Response
from fastapi.responses import FileResponse
from prometheus_client import CONTENT_TYPE_LATEST

from service.api.deps import service_of, within_deadline
from service.api.errors import error_response
from service.api.json_route import JsonBodyRoute
from service.api.presentation import introspection_cells, introspection_json, translate_json, translation_cells
from service.api.responses import FastJSON, answer
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
from service.engine.requests import AttentionOptions, IntrospectRequest, TranslateRequest
from service.engine.results import TextTranslation

T = TypeVar("T")
router = APIRouter()
bodies = APIRouter(route_class=JsonBodyRoute)  # the POST routes with one JSON model as their body
STATIC_DIR = Path(__file__).parent / "static"
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (400, 401, 413, 415, 422, 429, 503, 504)
}


def _count_tokens(request: Request, results: list[TextTranslation]) -> None:
    tokens = request.app.state.metrics.tokens
    for t in results:
        tokens.labels("in").inc(len(t.best.source_tokens))
        tokens.labels("out").inc(len(t.best.target_tokens))


@bodies.post("/v1/translate", response_model=TranslateResponse, responses=ERRORS, tags=["translate"])
async def translate(body: TranslateBody, request: Request) -> FastJSON:
    """Translate one text or a batch, with the attention of every output token."""
    started = time.perf_counter()
    a = body.attention
    one_text = request.state.one_text = isinstance(body.q, str)  # the error handler names `q`, not `q[0]`
    job = TranslateRequest(
        texts=[body.q] if isinstance(body.q, str) else body.q,
        model=body.model,
        source=body.source,
        target=body.target,
        beam_size=body.beam_size,
        n_best=body.n_best,
        max_output_tokens=body.max_output_tokens,
        attention=AttentionOptions(a.granularity, a.format, a.top_k, a.layer, a.heads),
        no_repeat_ngram=body.no_repeat_ngram,
        repetition_penalty=body.repetition_penalty,
        rerank=body.rerank,
    )
    results = await within_deadline(request, body.timeout_ms, service_of(request).translate(job))
    request.app.state.metrics.inference.labels("request").observe(time.perf_counter() - started)
    _count_tokens(request, results)
    return await answer(lambda: translate_json(results, one_text), translation_cells(results))


def introspect_request(body: IntrospectBody, **changes: Any) -> IntrospectRequest:
    """The engine request of a /v1/attention body (the SVG route narrows it with `changes`)."""
    fields = {f.name: getattr(body, f.name) for f in dataclasses.fields(IntrospectRequest) if f.name != "text"}
    return IntrospectRequest(text=body.q, **{**fields, **changes})


@bodies.post("/v1/attention", response_model=IntrospectResponse, responses=ERRORS, tags=["introspect"])
async def attention(body: IntrospectBody, request: Request) -> FastJSON:
    """Every layer and head of one translation (the one /v1/translate gives, or forced_target scored)."""
    job = introspect_request(body)
    result = await within_deadline(request, body.timeout_ms, service_of(request).introspect(job))
    return await answer(lambda: introspection_json(result), introspection_cells(result))


@bodies.post(
    "/v1/attention/svg",
    response_class=Response,
    responses={200: {"content": {"image/svg+xml": {}}}, **ERRORS},
    tags=["introspect"],
)
async def attention_svg(body: SvgBody, request: Request) -> Response:
    """A self-contained SVG heatmap of one layer's cross-attention (one head or the mean)."""
    service = service_of(request)
    translator = service.resolve(body.model, body.source, body.target)
    default, layers = translator.manifest.attention_view, translator.manifest.architecture.layers
    layer = default.layer if body.layer is None else body.layer  # the bundle's default view unless asked
    layer = layer + layers if layer < 0 else layer
    head = default.heads if body.head is None else body.head
    heads = None if head == "mean" else [head]
    job = introspect_request(body, model=translator.manifest.name, layers=[layer], heads=heads, self_attention=False)
    result = await within_deadline(request, body.timeout_ms, service.introspect(job))
    matrix = result.cross_attention[0].mean(axis=0)  # (T, S) over the chosen heads
    caption = f"layer {layer}, {'mean of heads' if head == 'mean' else f'head {head}'}"
    labels = [[t.text for t in tokens] for tokens in (result.best.source_tokens, result.best.target_tokens)]
    svg = await asyncio.to_thread(
        heatmap_svg, labels[0], labels[1], matrix.tolist(), f"{result.model}: {result.best.text}", caption
    )
    return Response(svg, media_type="image/svg+xml")


def describe(name: str, catalog: Catalog, invariance: dict[str, bool]) -> dict[str, Any]:
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
        # the startup check on this CPU (None: not checked), where quantization.batch_invariant is the export's
        "batch_invariant_here": invariance.get(name),
    }


@router.get("/v1/models", tags=["models"])
async def models(request: Request) -> dict[str, Any]:
    """The loaded models, and the default model of each language pair."""
    catalog: Catalog = service_of(request).catalog
    return {
        "models": [describe(name, catalog, request.app.state.invariance) for name in sorted(catalog.models)],
        "defaults": {f"{s}-{t}": name for (s, t), name in sorted(catalog.defaults.items())},
    }


@router.get("/v1/models/{name}", tags=["models"], responses={404: {"model": ErrorBody}})
async def model(name: str, request: Request) -> Any:
    """One model's languages, architecture, quantization, parity and quality figures."""
    catalog: Catalog = service_of(request).catalog
    if name not in catalog.models:
        return error_response(
            404, "unknown_model", f"no model named {name!r}; loaded: {', '.join(sorted(catalog.models))}", "name"
        )
    return describe(name, catalog, request.app.state.invariance)


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
    if state.load_error is not None:  # path-free (see app.public_reason)
        return error_response(503, "load_failed", state.load_error, headers={"Retry-After": "1"})
    if not state.ready:
        return error_response(503, "not_ready", "models are loading or warming up", headers={"Retry-After": "1"})
    if not state.service.scheduler.healthy:
        return error_response(503, "unhealthy", "the inference scheduler stopped; the server log has why")
    return {"status": "ready"}


@router.get("/metrics", tags=["health"])
async def metrics(request: Request) -> Response:
    """Prometheus metrics."""
    service_of(request)  # 503 while loading, as before
    return Response(request.app.state.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
