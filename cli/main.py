"""`attention-mt`: train, evaluate (and, as later parts land, export, serve, translate)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(
    help="attention-mt: attention seq2seq translation that shows its attention.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
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
) -> None:
    """Train a model: tokenizers, checkpoints, dev BLEU per epoch, early stop."""
    _training_side()
    from models.config import ConfigError, load_run_config
    from models.data import CorpusError
    from models.train import TrainError
    from models.train import train as run_training

    overrides: dict[str, Any] = {k: v for k, v in {"epochs": epochs, "max_steps": max_steps}.items() if v is not None}
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
        )
    except (ConfigError, CorpusError, TrainError) as exc:
        _fail(str(exc))
        return
    typer.echo(
        f"done: best dev BLEU {progress['best_dev_bleu']:.2f} at epoch {progress['best_epoch']}, "
        f"{progress['step']} steps; checkpoints in {out}"
    )


@app.command()
def evaluate(
    run_dir: Annotated[Path, typer.Argument(help="a run directory written by `train`")],
    split: Annotated[str, typer.Option(help="test or dev")] = "test",
    corpus: Annotated[Path | None, typer.Option(help="score this TSV instead of a split")] = None,
    beam: Annotated[int, typer.Option(help="beam size (1 = greedy)")] = 4,
    checkpoint: Annotated[str, typer.Option(help="checkpoint file in the run directory")] = "best.pt",
    limit: Annotated[int, typer.Option(help="score only the first N pairs (0 = all)")] = 0,
) -> None:
    """Compute sacreBLEU BLEU and chrF; print them and write a JSON next to the checkpoint."""
    _training_side()
    from models.data import CorpusError
    from models.evaluate import evaluate as run_evaluation

    if split not in ("test", "dev"):
        _fail(f"--split must be test or dev, got {split!r}")
    if beam < 1:
        _fail(f"--beam must be at least 1, got {beam}")
    if not (run_dir / checkpoint).is_file():
        _fail(f"{run_dir / checkpoint} does not exist; train first")
    try:
        result = run_evaluation(run_dir, split=split, corpus=corpus, beam=beam, checkpoint=checkpoint, limit=limit)
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
    corpus: Annotated[Path | None, typer.Option(help="corpus TSV (default: the shared Tatoeba corpus)")] = None,
) -> None:
    """Re-measure a bundle's test BLEU (greedy, beam 4) with the current search, into its manifest."""
    _training_side()
    from export.bundle_writer import ExportError
    from export.pipeline import rescore_bundle
    from models.data import CorpusError
    from service.engine.errors import EngineError

    try:
        written = rescore_bundle(bundle, corpus)
    except (CorpusError, EngineError, ExportError) as exc:
        _fail(str(exc))
        return
    typer.echo(written.manifest.model_dump_json(indent=2, include={"quality"}))


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
) -> None:
    """Serve the HTTP API (settings from MT_* environment variables; options override them)."""
    import uvicorn

    from service.api.app import create_app
    from service.api.logs import configure_logging
    from service.settings import Settings

    given: dict[str, Any] = {"host": host, "port": port, "bundles": bundles}
    settings = Settings(**{k: v for k, v in given.items() if v is not None})
    log_config = configure_logging()
    api = create_app(settings, exit_on_load_failure=True)

    class DrainingServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            api.state.draining = True  # /readyz answers 503 from the first signal on
            super().handle_exit(sig, frame)

    config = uvicorn.Config(
        api,
        host=settings.host,
        port=settings.port,
        timeout_graceful_shutdown=graceful_timeout,
        server_header=False,
        log_config=log_config,
        access_log=False,  # one JSON line per request comes from the app, with its request id
    )
    DrainingServer(config).run()


@app.command()
def translate(
    text: Annotated[str | None, typer.Argument(help="text to translate (default: every line of stdin)")] = None,
    model: Annotated[str | None, typer.Option(help="bundle name")] = None,
    source: Annotated[str | None, typer.Option(help="source language, with --target")] = None,
    target: Annotated[str | None, typer.Option(help="target language, with --source")] = None,
    beam: Annotated[int | None, typer.Option(help="beam size (1 = greedy; default: the model's own)")] = None,
    attention: Annotated[bool, typer.Option("--attention", help="show each target token's top source tokens")] = False,
    json_lines: Annotated[bool, typer.Option("--json", help="one JSON object per line")] = False,
    bundles: Annotated[Path | None, typer.Option(help="bundle directory (default: ./bundles)")] = None,
    batch_size: Annotated[int, typer.Option(help="lines translated together")] = 32,
) -> None:
    """Translate TEXT, or every line of stdin in batches, without a server; output in input order."""
    import sys

    from cli.translate_cmd import run_translate
    from service.engine.errors import EngineError
    from service.settings import Settings

    if model is None and (source is None or target is None):
        _fail("give --model, or both --source and --target")
    lines = [text] if text is not None else sys.stdin.read().splitlines()
    given: dict[str, Any] = {"bundles": bundles} if bundles else {}
    settings = Settings(**given)
    try:
        for line in run_translate(settings, lines, model, source, target, beam, attention, json_lines, batch_size):
            typer.echo(line)
    except EngineError as exc:
        _fail(exc.message)


if __name__ == "__main__":
    app()
