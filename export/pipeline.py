"""`attention-mt export`: checkpoint -> verified bundle, in a few verbs.

load -> export graphs -> check parity -> (quantize) -> measure quality -> write.
"""

from __future__ import annotations

import dataclasses
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from export.alignment import default_view
from export.bundle_writer import ExportError, check_destination, place, staging_dir, write_manifest
from export.graph_io import FamilyIO, family_io
from export.length_ratio import SLACK, output_ratio
from export.onnx_graphs import export_graphs
from export.parity import check_parity
from export.provenance import git_commit, versions
from export.quality import measure_quality
from export.quantize import is_batch_invariant, quantize_staged
from models.checkpoint import Checkpoint, load_checkpoint
from models.config import RNNConfig, TransformerConfig
from models.data import Pair, default_corpus_path, read_corpus, split_corpus
from models.registry import count_parameters
from service.engine.bundle import Bundle, load_bundle, sha256_of
from service.engine.manifest import (
    SCHEMA_VERSION,
    Architecture,
    Limits,
    Parity,
    Provenance,
    Quantization,
    Score,
    SearchDefaults,
    SpecialIds,
    Tokenizers,
)
from service.engine.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from service.engine.translator import Translator

# No trigram twice in an output: on real text it takes the shipped models' loop rate from 53% (en-zh,
# beam 4) and 2.5% (zh-en) to 0-0.4% on the dev split, with Tatoeba BLEU within 0.15 (docs/models.md).
NO_REPEAT_NGRAM = 3


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    quantize: str | None = None  # None or "int8"
    force: bool = False
    name: str | None = None  # default: the output directory's name
    checkpoint: str = "best.pt"
    parity_sentences: int = 200
    quality_split: str | None = "test"  # None: skip the BLEU measurement
    quality_beams: tuple[int, ...] = (1, 4)
    alignment: bool = True  # choose the default attention view by name alignment on the test split


def export_run(run_dir: Path, out: Path, options: ExportOptions = ExportOptions()) -> Bundle:
    """Export `run_dir`'s checkpoint to the bundle directory `out`; raises ExportError on failure."""
    check_destination(out, options.force)
    # 1) load the checkpoint and the sentences to check it on
    ckpt = load_checkpoint(run_dir / options.checkpoint)
    splits = split_corpus(read_corpus(_corpus_of(ckpt)))
    io = family_io(ckpt.config.model)
    staged = staging_dir(out)
    try:
        # 2) the fp32 graphs and tokenizers, with a provisional manifest so the engine can load them
        export_graphs(ckpt.model, io, staged)
        fields = _manifest_fields(ckpt, io, options.name or out.name, run_dir / options.checkpoint)
        _write_tokenizers(ckpt, staged)
        write_manifest(staged, fields)
        fp32 = Translator(load_bundle(staged))
        # 3) parity, three tiers
        checked = _parity_pairs(splits, options.parity_sentences)
        data = ckpt.config.data
        checked_ids = fp32.source_ids([p.text(data.source) for p in checked])
        report = check_parity(ckpt.model, io, fp32, checked_ids, ckpt.tgt_tokenizer)
        if report.failures():
            raise ExportError("parity failed: " + "; ".join(report.failures()))
        fields["parity"] = report.record()
        # the search users get (parity compared the plain model, under the default search)
        fields["search"] = SearchDefaults(
            no_repeat_ngram=NO_REPEAT_NGRAM,
            max_output_ratio=output_ratio(fp32, splits["train"]),
            max_output_slack=SLACK,
        )
        write_manifest(staged, fields)
        fp32 = Translator(load_bundle(staged))
        # 4) int8
        if options.quantize == "int8":
            dev = splits["dev"]
            sources, references = [p.text(data.source) for p in dev], [p.text(data.target) for p in dev]
            staged = quantize_staged(staged, out, fields, fp32, sources, references)
        else:
            fields["quantization"] = Quantization(mode="none", batch_invariant=is_batch_invariant(fp32, checked_ids))
        write_manifest(staged, fields)
        # 5) quality and the default attention view through the bundle's own engine; then placement
        final = Translator(load_bundle(staged))
        if options.alignment:
            fields["attention_view"] = default_view(final, splits["test"])
            write_manifest(staged, fields)
            final = Translator(load_bundle(staged))  # the beam's coverage penalty reads the chosen view
        if options.quality_split:
            fields["quality"] = _quality(
                final,
                splits[options.quality_split],
                options.quality_split,
                options.quality_beams,
                data.source,
                data.target,
            )
            write_manifest(staged, fields)
        return place(staged, out, options.force)
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def _corpus_of(ckpt: Checkpoint) -> Path:
    trained_on = ckpt.progress.get("corpus") or ckpt.config.data.corpus
    return Path(trained_on) if trained_on else default_corpus_path()


def _parity_pairs(splits: dict[str, list[Pair]], n: int) -> list[Pair]:
    """n dev pairs; a tiny corpus with a smaller dev split tops up from its other splits."""
    pool = splits["dev"] + splits["test"] + splits["train"]
    return pool[: max(n, 1)]


def _write_tokenizers(ckpt: Checkpoint, directory: Path) -> None:
    data = ckpt.config.data
    (directory / f"{data.source}.model").write_bytes(ckpt.src_tokenizer.model_proto)
    (directory / f"{data.target}.model").write_bytes(ckpt.tgt_tokenizer.model_proto)


def _quality(
    translator: Translator, pairs: list[Pair], split: str, beams: tuple[int, ...], source: str, target: str
) -> list[Score]:
    sources, references = [p.text(source) for p in pairs], [p.text(target) for p in pairs]
    return measure_quality(translator, sources, references, split, beams)


def _architecture(ckpt: Checkpoint) -> Architecture:
    cfg = ckpt.config.model
    config = {k: v for k, v in dataclasses.asdict(cfg).items() if v is not None}
    if isinstance(cfg, TransformerConfig):
        return Architecture(
            family="transformer",
            attention="multihead_scaled_dot",
            layers=cfg.dec_layers,
            heads=cfg.heads,
            encoder_layers=cfg.enc_layers,
            decoder_layers=cfg.dec_layers,
            parameters=count_parameters(ckpt.model),
            config=config,
        )
    assert isinstance(cfg, RNNConfig)
    return Architecture(
        family="rnn",
        attention=cfg.attention,
        layers=1,
        heads=1,
        encoder_layers=cfg.enc_layers,
        decoder_layers=1,
        parameters=count_parameters(ckpt.model),
        config=config,
    )


def _manifest_fields(ckpt: Checkpoint, io: FamilyIO, name: str, checkpoint_path: Path) -> dict[str, Any]:
    data = ckpt.config.data
    return {
        "schema_version": SCHEMA_VERSION,
        "name": name,
        "source_lang": data.source,
        "target_lang": data.target,
        "architecture": _architecture(ckpt),
        "graphs": {"encoder": io.encoder, "decoder": io.decoder},
        "state": io.state,
        "special_ids": SpecialIds(pad=PAD_ID, unk=UNK_ID, bos=BOS_ID, eos=EOS_ID),
        "limits": Limits(max_source_tokens=data.max_src_tokens, max_target_tokens=data.max_tgt_tokens),
        "tokenizers": Tokenizers(source=f"{data.source}.model", target=f"{data.target}.model"),
        "quantization": Quantization(mode="none"),
        "parity": Parity(
            max_abs_diff={}, tolerances={}, sentences=0, token_ids_identical=0.0, strings_identical=0.0, passed=False
        ),
        "provenance": Provenance(
            checkpoint_sha256=sha256_of(checkpoint_path),
            corpus_sha256=ckpt.progress.get("corpus_sha256"),
            git_commit=git_commit(),
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
            versions=versions(),
            trained_epochs=ckpt.progress.get("best_epoch"),
            train_seconds=ckpt.progress.get("train_seconds"),
        ),
    }
