"""`attention-mt`: train, evaluate (and, as later parts land, export, serve, translate)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(
    help="attention-mt: attention seq2seq translation that shows its attention.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: [model] in a help text stays text, and flags show no type
)


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=2)


def _new_checkpoint(out: Path) -> Path:
    """`out`/best.pt, refusing to overwrite one: a checkpoint may be the only copy of a run."""
    path = out / "best.pt"
    if path.exists():
        _fail(f"{path} exists; choose another --out")
    return path


def _training_side() -> None:
    """train, evaluate and export need torch and models/, which the serving image leaves out."""
    try:
        import models.checkpoint  # noqa: F401
    except ModuleNotFoundError as exc:
        _fail(
            f"this command needs the training code and extras ({exc.name} is missing): pip install -e '.[train,export]'"
        )


@app.command()
def train(
    config: Annotated[Path, typer.Argument(help="run config TOML, e.g. models/configs/transformer-en-zh.toml")],
    out: Annotated[Path, typer.Option("--out", help="run directory for checkpoints and logs")],
    resume: Annotated[bool, typer.Option("--resume", help="continue the run in --out from last.pt")] = False,
    corpus: Annotated[Path | None, typer.Option(help="corpus TSV (default: the shared Tatoeba corpus)")] = None,
    epochs: Annotated[int | None, typer.Option(help="override [train] epochs")] = None,
    max_steps: Annotated[int | None, typer.Option(help="override [train] max_steps (0 = no limit)")] = None,
    init_from: Annotated[
        Path | None, typer.Option("--init-from", help="fine-tune: start from this checkpoint's weights and tokenizers")
    ] = None,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads (default: all cores)")] = None,
    max_minutes: Annotated[
        float | None, typer.Option(help="override [train] max_minutes: stop after the epoch that passes it")
    ] = None,
    tokenizers: Annotated[
        Path | None, typer.Option("--tokenizers", help="a run's tokenizers/ folder to start with, instead of new ones")
    ] = None,
    prepare_only: Annotated[
        bool, typer.Option("--prepare-only", help="write tokenizers and alignments, then stop (train elsewhere)")
    ] = False,
) -> None:
    """Train a model: tokenizers, checkpoints, dev BLEU per epoch, early stop."""
    _training_side()
    from models.config import ConfigError, load_run_config
    from models.data import CorpusError
    from models.train import TrainError
    from models.train import train as run_training

    asked = {"epochs": epochs, "max_steps": max_steps, "max_minutes": max_minutes}
    overrides: dict[str, Any] = {k: v for k, v in asked.items() if v is not None}
    try:
        run_config = load_run_config(config)
        progress = run_training(
            run_config,
            out,
            resume=resume,
            corpus=corpus,
            train_overrides=overrides,
            init_from=init_from,
            threads=threads,
            tokenizers_from=tokenizers,
            prepare_only=prepare_only,
        )
    except (ConfigError, CorpusError, TrainError) as exc:
        _fail(str(exc))
        return
    if prepare_only:
        start = f"--init-from {init_from}" if init_from else f"--tokenizers {out}/tokenizers"
        typer.echo(f"prepared {progress['pairs']:,} training pairs in {out}; train with {start}")
        return
    typer.echo(
        f"done: best dev BLEU {progress['best_dev_bleu']:.2f} at epoch {progress['best_epoch']}, "
        f"{progress['step']} steps; checkpoints in {out}"
    )


@app.command()
def evaluate(
    path: Annotated[Path, typer.Argument(help="a run directory written by `train`, or a bundle directory")],
    split: Annotated[str, typer.Option(help="test or dev")] = "test",
    sets: Annotated[
        str, typer.Option(help="comma-separated: tatoeba (everyday sentences), news (real text)")
    ] = "tatoeba,news",
    corpus: Annotated[Path | None, typer.Option(help="score this TSV instead of the sets")] = None,
    beam: Annotated[int, typer.Option(help="beam size (1 = greedy)")] = 4,
    no_repeat_ngram: Annotated[
        int | None, typer.Option(help="no n-gram of this size twice (default: the bundle's; 3 for a run)")
    ] = None,
    checkpoint: Annotated[str, typer.Option(help="checkpoint file in a run directory")] = "best.pt",
    limit: Annotated[int, typer.Option(help="score only the first N pairs of each set (0 = all)")] = 0,
) -> None:
    """BLEU, chrF and loop rate on Tatoeba and real text; a run's JSON is written next to its checkpoint."""
    _training_side()
    from models.data import CorpusError
    from models.evaluate import SETS
    from models.evaluate import evaluate as run_evaluation

    chosen = tuple(s.strip() for s in sets.split(",") if s.strip())
    if split not in ("test", "dev"):
        _fail(f"--split must be test or dev, got {split!r}")
    if not chosen or set(chosen) - set(SETS):
        _fail(f"--sets takes {', '.join(SETS)}, got {sets!r}")
    if beam < 1:
        _fail(f"--beam must be at least 1, got {beam}")
    if not (path / "manifest.json").is_file() and not (path / checkpoint).is_file():
        _fail(f"{path} is neither a bundle (no manifest.json) nor a run with {checkpoint}; train first")
    try:
        result = run_evaluation(path, split, corpus, beam, checkpoint, limit, chosen, no_repeat_ngram)
    except CorpusError as exc:
        _fail(str(exc))
        return
    typer.echo(json.dumps(result, indent=2, ensure_ascii=False))


@app.command()
def export(
    run_dir: Annotated[Path, typer.Argument(help="a run directory written by `train`")],
    out: Annotated[Path, typer.Option("--out", help="bundle directory to write")],
    quantize: Annotated[str | None, typer.Option(help="int8: dynamic int8 quantization")] = None,
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing bundle")] = False,
    name: Annotated[str | None, typer.Option(help="bundle name (default: the --out directory's name)")] = None,
    checkpoint: Annotated[str, typer.Option(help="checkpoint file in the run directory")] = "best.pt",
    parity_sentences: Annotated[int, typer.Option(help="sentences decoded by both PyTorch and ONNX")] = 200,
    quality: Annotated[bool, typer.Option(help="measure test BLEU (greedy and beam 4) into the manifest")] = True,
) -> None:
    """Export a checkpoint to a verified ONNX bundle (parity checked, optionally int8)."""
    _training_side()
    from export.bundle_writer import ExportError
    from export.pipeline import ExportOptions, export_run
    from models.data import CorpusError

    if quantize not in (None, "int8"):
        _fail(f"--quantize takes int8, got {quantize!r}")
    if not (run_dir / checkpoint).is_file():
        _fail(f"{run_dir / checkpoint} does not exist; train first")
    options = ExportOptions(
        quantize=quantize,
        force=force,
        name=name,
        checkpoint=checkpoint,
        parity_sentences=parity_sentences,
        quality_split="test" if quality else None,
    )
    try:
        bundle = export_run(run_dir, out, options)
    except (ExportError, CorpusError) as exc:
        _fail(str(exc))
        return
    m = bundle.manifest
    typer.echo(
        f"wrote {out}: {m.name} ({m.source_lang}->{m.target_lang}, {m.architecture.family}, "
        f"{m.quantization.mode}); parity: ids identical on {m.parity.token_ids_identical:.0%} of "
        f"{m.parity.sentences} sentences"
    )
    typer.echo(m.model_dump_json(indent=2, include={"parity", "quantization", "quality"}))


@app.command("convert-hf")
def convert_hf(
    model_dir: Annotated[Path, typer.Argument(help="a Marian checkpoint directory as save_pretrained writes it")],
    out: Annotated[Path, typer.Option("--out", help="bundle directory to write; its last component is the name")],
    source: Annotated[str, typer.Option(help="source language code, e.g. en")],
    target: Annotated[str, typer.Option(help="target language code, e.g. zh")],
    target_token: Annotated[
        str | None,
        typer.Option("--target-token", help="multilingual targets: put before every source, e.g. >>cmn_Hans<<"),
    ] = None,
    int8: Annotated[bool, typer.Option("--int8", help="quantize to int8 and record what it changes")] = False,
    force: Annotated[bool, typer.Option("--force", help="replace an existing bundle at --out")] = False,
    align_sample: Annotated[
        Path | None,
        typer.Option(
            "--align-sample",
            help="a small parallel sample (source<TAB>target lines): chooses the default attention view by "
            "name alignment, is checked for parity first, and scores BLEU",
        ),
    ] = None,
    parity_sentences: Annotated[
        int, typer.Option("--parity-sentences", help="sentences decoded by both transformers and the bundle")
    ] = 50,
) -> None:
    """Convert a Hugging Face Marian (OPUS-MT) checkpoint into a bundle, checked against transformers."""
    _training_side()
    try:
        from export.bundle_writer import ExportError
        from export.convert_hf import ConvertOptions
        from export.convert_hf import convert_hf as run_conversion
    except ModuleNotFoundError as exc:
        _fail(f"convert-hf needs the export extra ({exc.name} is missing): pip install -e '.[export]'")
        return
    options = ConvertOptions(source, target, target_token, int8, force, align_sample, parity_sentences)
    try:
        bundle = run_conversion(model_dir, out, options)
    except ExportError as exc:
        _fail(str(exc))
        return
    m = bundle.manifest
    typer.echo(
        f"wrote {out}: {m.name} ({m.source_lang}->{m.target_lang}, {m.quantization.mode}); parity with "
        f"{m.parity.reference} on {m.parity.sentences} sentences: greedy ids {m.parity.token_ids_identical:.0%}, "
        f"beam-{m.parity.beam_size} texts {m.parity.beam_strings_identical:.0%} identical"
    )
    typer.echo(m.model_dump_json(indent=2, include={"parity", "quantization", "quality", "attention_view", "search"}))


@app.command()
def rescore(
    bundle: Annotated[Path, typer.Argument(help="a bundle directory, e.g. bundles/zh-en")],
    corpus: Annotated[Path | None, typer.Option(help="Tatoeba TSV (default: the shared corpus)")] = None,
    real_text: Annotated[Path | None, typer.Option(help="real-text TSV (default: the shared news-zh-en)")] = None,
    no_repeat_ngram: Annotated[
        int | None, typer.Option(help="set the bundle's default: no n-gram of this size twice (0: off)")
    ] = None,
    repetition_penalty: Annotated[
        float | None, typer.Option(help="set the bundle's default penalty on written tokens (1.0: off)")
    ] = None,
    ratio_from_data: Annotated[
        bool,
        typer.Option("--ratio-from-data", help="cap outputs at the training data's 99th-percentile length ratio"),
    ] = False,
) -> None:
    """Re-measure a bundle (Tatoeba and real-text test splits, greedy and beam 4) into its manifest."""
    _training_side()
    from export.bundle_writer import ExportError
    from export.rescore import RescoreOptions, rescore_bundle
    from models.data import CorpusError
    from service.engine.errors import EngineError

    options = RescoreOptions(corpus, real_text, (1, 4), no_repeat_ngram, repetition_penalty, ratio_from_data)
    try:
        written = rescore_bundle(bundle, options)
    except (CorpusError, EngineError, ExportError) as exc:
        _fail(str(exc))
        return
    typer.echo(written.manifest.model_dump_json(indent=2, include={"search", "quality"}))


@app.command()
def average(
    checkpoints: Annotated[list[Path], typer.Argument(help="checkpoints of one run, e.g. its last few epochs")],
    out: Annotated[Path, typer.Option("--out", help="run directory to write best.pt into")],
) -> None:
    """Average checkpoints' weights into one (usually a little better than any of them)."""
    _training_side()
    from models.average import AverageError, average_to

    path = _new_checkpoint(out)
    try:
        average_to(checkpoints, path)
    except AverageError as exc:
        _fail(str(exc))
        return
    typer.echo(f"wrote {path}: the mean of {len(checkpoints)} checkpoints")


@app.command("import-bundle")
def import_bundle(
    bundle: Annotated[Path, typer.Argument(help="a bundle directory, e.g. bundles/en-zh")],
    out: Annotated[Path, typer.Option("--out", help="run directory to write best.pt into")],
    config: Annotated[Path, typer.Option(help="run config TOML for [data] and [train]; the [model] is the bundle's")],
) -> None:
    """Rebuild a PyTorch checkpoint from a bundle's graphs, to fine-tune or benchmark a shipped model."""
    _training_side()
    from export.bundle_import import BundleImportError
    from export.bundle_import import import_bundle as run_import
    from models.checkpoint import save_checkpoint
    from models.config import ConfigError, load_run_config
    from service.engine.errors import EngineError

    path = _new_checkpoint(out)
    try:
        ckpt = run_import(bundle, load_run_config(config))
    except (BundleImportError, ConfigError, EngineError) as exc:
        _fail(str(exc))
        return
    save_checkpoint(path, ckpt)
    typer.echo(f"wrote {path} from {bundle} ({ckpt.progress['quantization']} weights)")


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="interface to bind (MT_HOST; default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="port (MT_PORT; default 8000)")] = None,
    bundles: Annotated[Path | None, typer.Option(help="bundle directory (MT_BUNDLES; default: ./bundles)")] = None,
    graceful_timeout: Annotated[int, typer.Option(help="seconds to finish in-flight requests on SIGTERM")] = 20,
    drain_settle: Annotated[
        float | None,
        typer.Option(help="seconds to keep accepting after SIGTERM (MT_DRAIN_SETTLE_S; default 3)"),
    ] = None,
    workers: Annotated[
        int | None, typer.Option(help="server processes sharing the port (MT_WORKERS; default 1)")
    ] = None,
) -> None:
    """Serve the HTTP API (settings from MT_* environment variables; options override them)."""
    from cli.serve_cmd import run_service
    from cli.workers import serve_workers
    from service.api.logs import configure_logging
    from service.settings import Settings

    given: dict[str, Any] = {
        "host": host, "port": port, "bundles": bundles, "drain_settle_s": drain_settle, "workers": workers
    }  # fmt: skip
    settings = Settings(**{k: v for k, v in given.items() if v is not None})
    if settings.workers > 1:
        configure_logging()
        code = serve_workers(settings, graceful_timeout)
    else:
        code = run_service(settings, graceful_timeout)
    if code:  # a broken scheduler drained (4), or a worker ended on its own: say so to the orchestrator
        raise typer.Exit(code)


@app.command()
def translate(
    text: Annotated[
        str | None, typer.Argument(help="a text to translate, or a file to translate line by line (default: --input)")
    ] = None,
    input_file: Annotated[
        Path | None, typer.Option("--input", "-i", help="file to translate line by line (default: stdin)")
    ] = None,
    output_file: Annotated[
        Path | None, typer.Option("--output", "-o", help="file to write, one line per input line (default: stdout)")
    ] = None,
    model: Annotated[str | None, typer.Option(help="bundle name")] = None,
    source: Annotated[str | None, typer.Option(help='source language, with --target; "auto" detects it')] = None,
    target: Annotated[str | None, typer.Option(help="target language, with --source")] = None,
    beam: Annotated[int | None, typer.Option(help="beam size (1 = greedy; default: the model's own)")] = None,
    attention: Annotated[bool, typer.Option("--attention", help="show each target token's top source tokens")] = False,
    json_lines: Annotated[bool, typer.Option("--json", help="one JSON object per line")] = False,
    bundles: Annotated[Path | None, typer.Option(help="bundle directory (default: ./bundles)")] = None,
    batch_size: Annotated[int, typer.Option(help="lines translated together")] = 32,
) -> None:
    """Translate TEXT, a file or stdin, without a server: one output line per input line, in order.

    Blank lines stay blank. A line that cannot be translated becomes an empty line and stderr says
    why; the exit code is then 1. Paragraph-long lines are cut into sentences and joined back."""
    import sys

    from cli.translate_cmd import Job, NotUtf8, run_translate
    from service.engine.errors import EngineError
    from service.settings import Settings

    if model is None and (source is None or target is None):
        _fail("give --model, or both --source and --target")
    if text is not None and input_file is not None:
        _fail("give TEXT or --input, not both")
    if text is not None and Path(text).is_file():
        typer.echo(f"note: {text} is a file: translating its lines (pipe the words in to translate them)", err=True)
        input_file, text = Path(text), None
    job = Job(model, source, target, beam, attention, json_lines, max(batch_size, 1))
    given: dict[str, Any] = {"bundles": bundles} if bundles else {}
    settings = Settings(**given)
    try:
        stream = (
            io.BytesIO(text.encode())
            if text is not None
            else (input_file.open("rb") if input_file else sys.stdin.buffer)
        )
        size = input_file.stat().st_size if input_file else None
        out = output_file.open("w", encoding="utf-8") if output_file else sys.stdout
    except OSError as exc:
        _fail(str(exc))
        return
    try:
        outcome = run_translate(settings, stream, out, job, sys.stderr, size)
    except NotUtf8 as exc:
        _fail(str(exc))
        return
    except EngineError as exc:
        _fail(exc.message)
        return
    finally:
        if output_file:
            out.close()
    if outcome.failed:
        typer.echo(f"error: {len(outcome.failed)} of {outcome.lines} lines failed: {outcome.failed[:10]}", err=True)
        raise typer.Exit(code=1)


if __name__ == "__main__":
    app()
