"""`attention-mt translate`: the service's engine in-process, batches of lines, no server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

from service.api.app import session_config
from service.engine.catalog import Catalog
from service.engine.errors import EngineError
from service.engine.requests import AttentionOptions, TranslateRequest
from service.engine.service import TranslationService
from service.settings import Settings


def _describe(translation: dict[str, Any]) -> list[str]:
    """One line per target token: its top source tokens and weights."""
    lines = []
    sources = translation["source_tokens"]
    for token, row in zip(translation["target_tokens"], translation["attention"], strict=True):
        best = ", ".join(f"{sources[e['index']]['text']} {e['weight']:.2f}" for e in row)
        lines.append(f"  {token['text']}: {best}")
    return lines


def run_translate(
    settings: Settings,
    lines: list[str],
    model: str | None,
    source: str | None,
    target: str | None,
    beam: int | None,
    attention: bool,
    json_lines: bool,
    batch_size: int,
) -> Iterator[str]:
    service = TranslationService(Catalog.load(settings.bundles, session_config(settings)), settings)
    view = AttentionOptions(format="topk" if attention else "none", top_k=3)

    async def translate_all() -> list[dict[str, Any]]:
        service.batcher.start()
        try:
            out: list[dict[str, Any]] = []
            for start in range(0, len(lines), batch_size):
                chunk = lines[start : start + batch_size]
                request = TranslateRequest(chunk, model, source, target, beam_size=beam, attention=view)
                try:
                    out += (await service.translate(request))["translations"]
                except EngineError as exc:
                    if exc.field and exc.field.startswith("q["):  # name the input line, not the batch slot
                        line = start + int(exc.field[2:-1]) + 1
                        exc.message = f"line {line}: " + exc.message.split(" ", 1)[1]
                    raise
            return out
        finally:
            await service.batcher.stop()

    for translation in asyncio.run(translate_all()):
        if json_lines:
            yield json.dumps(translation, ensure_ascii=False)
        else:
            yield translation["text"]
            if attention:
                yield from _describe(translation)
