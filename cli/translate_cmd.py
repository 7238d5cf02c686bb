"""`attention-mt translate`: the service's engine in-process, over a file or stdin, line by line.

The input is streamed in chunks of lines (memory stays flat on a large file), and each output
line answers its input line: a blank line stays blank, and a line that cannot be translated
becomes an empty line while stderr says why; the run goes on. Bytes that are not UTF-8 stop the
run with the line and byte offset.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from service.api.app import build_service, session_config
from service.api.presentation import translation_json
from service.api.responses import dumps
from service.engine.catalog import Catalog
from service.engine.errors import EngineError
from service.engine.requests import AttentionOptions, TranslateRequest
from service.engine.results import TextTranslation
from service.engine.service import TranslationService
from service.settings import Settings


class NotUtf8(ValueError):
    """Input bytes that are not UTF-8; the message names the line and the byte offset."""


@dataclass(frozen=True)
class Job:
    model: str | None
    source: str | None
    target: str | None
    beam: int | None
    attention: bool
    json_lines: bool
    batch_size: int


@dataclass
class Outcome:
    """What a run wrote: how many lines, and which failed (an empty line stands for each)."""

    lines: int = 0
    failed: list[int] = field(default_factory=list)


def read_lines(stream: IO[bytes]) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line, decoded strictly as UTF-8."""
    offset = 0
    for number, raw in enumerate(stream, start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise NotUtf8(
                f"the input is not UTF-8: line {number}, byte offset {offset + exc.start} "
                f"(0x{raw[exc.start]:02x}); convert it first, e.g. iconv -t UTF-8"
            ) from None
        offset += len(raw)
        yield number, text.rstrip("\r\n")


def _chunks(lines: Iterator[tuple[int, str]], size: int) -> Iterator[list[tuple[int, str]]]:
    chunk: list[tuple[int, str]] = []
    try:
        for item in lines:
            chunk.append(item)
            if len(chunk) >= size:
                yield chunk
                chunk = []
    except NotUtf8:
        if chunk:  # what came before the bad bytes is still translated and written
            yield chunk
        raise
    if chunk:
        yield chunk


async def _translate_chunk(
    service: TranslationService, job: Job, chunk: list[tuple[int, str]], warn: Any
) -> list[TextTranslation | None]:
    """Each non-blank line's translation (None for blank or failed lines, which `warn` reports)."""
    view = AttentionOptions(format="topk" if job.attention else "none", top_k=3)
    todo = [i for i, (_, text) in enumerate(chunk) if text.strip()]
    out: list[TextTranslation | None] = [None] * len(chunk)
    while todo:
        texts = [chunk[i][1] for i in todo]
        request = TranslateRequest(texts, job.model, job.source, job.target, beam_size=job.beam, attention=view)
        try:
            results = await service.translate(request)
        except EngineError as exc:
            if exc.subject is None or exc.subject.index is None:
                raise  # not about one line (an unknown model, say): the whole run stops
            bad = todo[exc.subject.index]
            warn(exc.worded(f"line {chunk[bad][0]}"), failed=chunk[bad][0])
            todo.remove(bad)
            continue
        for i, result in zip(todo, results, strict=True):
            out[i] = result
            for notice in result.warnings:
                warn(notice.worded(f"line {chunk[i][0]}"))
        break
    return out


def _format(number: int, result: TextTranslation | None, job: Job) -> list[str]:
    if job.json_lines:
        name = f"line {number}"  # what its warnings call the text
        body = {"line": number, **translation_json(result, name)} if result else {"line": number, "text": ""}
        return [dumps(body).decode()]
    if result is None:
        return [""]
    lines = [result.best.text]
    if job.attention:
        sources = result.best.source_tokens
        for token, row in zip(result.best.target_tokens, result.best.attention, strict=True):
            best = sorted(range(len(row)), key=lambda j: -row[j])[:3]
            lines.append(f"  {token.text}: " + ", ".join(f"{sources[j].text} {row[j]:.2f}" for j in best))
    return lines


async def _run(
    settings: Settings, stream: IO[bytes], out: IO[str], job: Job, err: IO[str], size: int | None
) -> Outcome:
    service = build_service(Catalog.load(settings.bundles, session_config(settings)), settings)
    service.scheduler.start()
    outcome = Outcome()
    progress = _progress(err, size)

    def warn(message: str, failed: int | None = None) -> None:
        (progress.console.print if progress else lambda m: print(m, file=err))(
            f"warning: {message}" if failed is None else f"error: {message}"
        )
        if failed is not None:
            outcome.failed.append(failed)

    try:
        if progress:
            progress.start()
        async for chunk, results in _translated(service, job, stream, warn):
            for (number, _), result in zip(chunk, results, strict=True):
                out.writelines(line + "\n" for line in _format(number, result, job))
            out.flush()
            outcome.lines += len(chunk)
            if progress:
                progress.update(progress.task_ids[0], completed=stream.tell() if size else outcome.lines)
    finally:
        if progress:
            progress.stop()
        await service.scheduler.stop()
    return outcome


async def _translated(
    service: TranslationService, job: Job, stream: IO[bytes], warn: Any
) -> AsyncIterator[tuple[list[tuple[int, str]], list[TextTranslation | None]]]:
    for chunk in _chunks(read_lines(stream), job.batch_size):
        yield chunk, await _translate_chunk(service, job, chunk, warn)


def _progress(err: IO[str], size: int | None) -> Progress | None:
    """A progress bar on stderr, only when it is a terminal."""
    if not err.isatty():
        return None
    from rich.console import Console

    progress = Progress(
        TextColumn("translating"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        console=Console(file=err),
    )
    progress.add_task("translate", total=size)
    return progress


def run_translate(
    settings: Settings, stream: IO[bytes], out: IO[str], job: Job, err: IO[str], size: int | None = None
) -> Outcome:
    """Translate every line of `stream` into `out`; raises NotUtf8 or a run-wide EngineError."""
    return asyncio.run(_run(settings, stream, out, job, err, size))
