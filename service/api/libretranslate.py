"""A LibreTranslate-compatible surface beside /v1, for the clients that already speak it.

`POST /translate`, `POST /detect` and `GET /languages` take form or JSON bodies as LibreTranslate
does (`q`, `source` including "auto", `target`, `format`, `api_key`, `alternatives`) and answer in
its shapes (`translatedText`, `detectedLanguage`, `alternatives`). They run on the same scheduler,
limits and keys as /v1 and refuse the same things; errors keep LibreTranslate's body, a string
under "error" (with our code and field beside it), and its statuses: 400 for a bad request, 403
for a missing or unknown key, 429 when rate limited.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError

from service.api.auth import KeyRing
from service.api.deps import service_of, within_deadline
from service.api.errors import STATUS as ENGINE_STATUS
from service.api.errors import field_of
from service.engine.errors import EngineError, Overloaded
from service.engine.language import detect
from service.engine.requests import AttentionOptions, TranslateRequest
from service.engine.service import AUTO

router = APIRouter(tags=["libretranslate"])
M = TypeVar("M", bound=BaseModel)


class LtErrorBody(BaseModel):
    error: str = Field(description="what went wrong, in words (LibreTranslate's shape)")
    code: str | None = None
    field: str | None = None


class LtTranslateIn(BaseModel):
    """Unknown fields are ignored, as LibreTranslate does; known ones must have their types."""

    q: str | list[str]
    source: str = Field("auto", description='a language code, or "auto"')
    target: str
    format: str = Field("text", description='"text" (HTML is not supported)')
    api_key: str | None = None
    alternatives: int = Field(0, description="0..3 alternative translations")


class LtDetectIn(BaseModel):
    q: str
    api_key: str | None = None


class LtDetected(BaseModel):
    confidence: float = Field(description="0..100")
    language: str


class LtTranslateOut(BaseModel):
    translatedText: str | list[str]  # noqa: N815 (LibreTranslate's name)
    detectedLanguage: LtDetected | list[LtDetected | None] | None = None  # noqa: N815
    alternatives: list[str] | list[list[str]] | None = None


class LtLanguage(BaseModel):
    code: str
    name: str
    targets: list[str]


ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": LtErrorBody} for code in (400, 403, 429, 500, 503, 504)}


def _body(model: type[BaseModel]) -> dict[str, Any]:
    """OpenAPI for a body that is a form or JSON, as LibreTranslate takes it."""
    schema = model.model_json_schema()
    content = {kind: {"schema": schema} for kind in ("application/x-www-form-urlencoded", "application/json")}
    return {"requestBody": {"required": True, "content": content}}


NAMES = {
    "ar": "Arabic", "de": "German", "en": "English", "es": "Spanish", "fr": "French", "it": "Italian",
    "ja": "Japanese", "ko": "Korean", "nl": "Dutch", "pt": "Portuguese", "ru": "Russian", "zh": "Chinese",
}  # fmt: skip
STATUS = {401: 403, 413: 400, 422: 400}  # ours -> LibreTranslate's


class LtError(Exception):
    def __init__(
        self, status: int, message: str, code: str, field: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.field, self.headers = status, message, code, field, headers or {}


def _answer(error: LtError) -> JSONResponse:
    body = {"error": error.message, "code": error.code, "field": error.field}
    return JSONResponse(body, status_code=STATUS.get(error.status, error.status), headers=error.headers)


async def _fields(request: Request) -> tuple[dict[str, Any], bool]:
    """The body as LibreTranslate reads it: JSON, or a form (q may repeat for a list); and whether a form."""
    raw = await request.body()
    if not raw:
        return {}, False
    if request.headers.get("content-type", "").startswith("application/json"):
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise LtError(400, f"the body is not valid JSON: {exc}", "invalid_json", "body") from None
        if not isinstance(doc, dict):
            raise LtError(400, "the body must be a JSON object", "invalid_request", "body")
        return doc, False
    try:
        form = parse_qs(raw.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise LtError(400, "the form is not UTF-8", "invalid_request", "body") from None
    return {k: v if len(v) > 1 else v[0] for k, v in form.items()}, True


def _parsed(model: type[M], fields: dict[str, Any], form: bool) -> M:
    """The body's known fields, typed: strictly for JSON, converted from text for a form."""
    try:
        return model.model_validate(fields, strict=not form)
    except ValidationError as exc:
        first = exc.errors()[0]
        name = ".".join(str(p) for p in first["loc"][:1]) or "body"
        message = (
            f"Invalid request: missing {name} parameter"
            if first["type"] == "missing"
            else f"Invalid request: {name}: {first['msg']}"
        )
        raise LtError(400, message, "invalid_request", name) from None


def _authorize(request: Request, key: str | None) -> None:
    ring: KeyRing = request.app.state.keyring
    if not ring.on or request.headers.get("x-api-key") is not None:  # the middleware checked the header
        return
    _, refusal = ring.check(key.encode() if key else b"", "a valid api_key")
    if refusal is not None:
        raise LtError(refusal.status, refusal.message, refusal.code, "api_key", refusal.headers)


async def _guarded(request: Request, model: type[BaseModel] | None, work: Any) -> JSONResponse:
    try:
        fields, form = await _fields(request)
        body = _parsed(model, fields, form) if model is not None else None
        _authorize(request, getattr(body, "api_key", None) or (fields.get("api_key") if form else None))
        return JSONResponse(await work(body))
    except LtError as exc:
        return _answer(exc)
    except EngineError as exc:
        status = 503 if isinstance(exc, Overloaded) else _status(exc)
        headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, Overloaded) else {}
        field = field_of(exc, request)
        return _answer(LtError(status, exc.worded(field), exc.code, field, headers))


def _status(exc: EngineError) -> int:
    return next((code for kind, code in ENGINE_STATUS.items() if isinstance(exc, kind)), 500)


@router.post("/translate", response_model=LtTranslateOut, responses=ERRORS, openapi_extra=_body(LtTranslateIn))
async def translate(request: Request) -> JSONResponse:
    """LibreTranslate's translate: q (text or list), source ("auto" detects), target, format, alternatives."""

    async def work(body: LtTranslateIn) -> dict[str, Any]:
        q, target, source = body.q, body.target, body.source or AUTO
        if body.format != "text":
            message = f'format "{body.format}" is not supported; send plain text (format "text")'
            raise LtError(400, message, "invalid_request", "format")
        if not 0 <= body.alternatives <= 3:
            raise LtError(400, "Invalid request: alternatives must be 0..3", "invalid_request", "alternatives")
        alternatives = body.alternatives
        job = TranslateRequest(
            [q] if isinstance(q, str) else q,
            source=source,
            target=target,
            beam_size=max(alternatives + 1, 4) if alternatives else None,  # else the model's own
            n_best=alternatives + 1,
            attention=AttentionOptions(format="none"),
        )
        request.state.one_text = isinstance(q, str)
        results = await within_deadline(request, None, service_of(request).translate(job))
        texts_out = [r.best.text for r in results]
        out: dict[str, Any] = {"translatedText": texts_out[0] if isinstance(q, str) else texts_out}
        if source == AUTO:
            detected = [
                {"confidence": round(100 * r.detected.confidence, 1), "language": r.detected.language}
                if r.detected
                else None
                for r in results
            ]
            out["detectedLanguage"] = detected[0] if isinstance(q, str) else detected
        if alternatives:
            alts = [[a.text for a in r.alternatives] for r in results]
            out["alternatives"] = alts[0] if isinstance(q, str) else alts
        return out

    return await _guarded(request, LtTranslateIn, work)


@router.post("/detect", response_model=list[LtDetected], responses=ERRORS, openapi_extra=_body(LtDetectIn))
async def detect_language(request: Request) -> JSONResponse:
    """LibreTranslate's detect: among the languages the loaded models read or write."""

    async def work(body: LtDetectIn) -> Any:
        text = body.q
        languages = sorted({code for pair in service_of(request).catalog.defaults for code in pair})
        found = detect(text, languages)
        if found is None:
            return [{"confidence": 0.0, "language": languages[0]}]
        return [{"confidence": round(100 * found.confidence, 1), "language": found.language}]

    return await _guarded(request, LtDetectIn, work)


@router.get("/languages", response_model=list[LtLanguage], responses=ERRORS)
async def languages(request: Request) -> JSONResponse:
    """LibreTranslate's languages: each language the models read or write, with its targets."""

    async def work(body: None) -> Any:
        pairs = service_of(request).catalog.defaults
        codes = sorted({c for pair in pairs for c in pair})
        return [{"code": c, "name": NAMES.get(c, c), "targets": sorted(t for s, t in pairs if s == c)} for c in codes]

    return await _guarded(request, None, work)
