"""`attention-mt convert-hf`: a Hugging Face Marian (OPUS-MT) checkpoint -> a verified bundle.

read and check -> load with transformers -> our Transformer -> graphs -> parity with transformers
-> (int8) -> default attention view (and quality) on the sample -> write atomically.

The bundle keeps the graph contract of this project's own bundles (encoder; one decoder step with
KV cache and every layer's cross- and self-attention), so the service cannot tell them apart.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from transformers import MarianMTModel

from export.alignment import sample_view
from export.bundle_writer import check_destination, place, staging_dir, write_manifest
from export.conversion_sample import Pair, read_sample, synthetic_sources
from export.graph_io import FamilyIO, family_io
from export.marian_checkpoint import ConversionError, MarianCheckpoint, read_checkpoint
from export.marian_parity import check_reference_parity, reference_tokenizer
from export.marian_weights import convert_weights, load_reference, search_defaults
from export.onnx_graphs import export_graphs
from export.provenance import git_commit, versions
from export.quality import measure_quality
from export.quantize import is_batch_invariant, quantize_staged
from models.registry import count_parameters
from models.transformer import Transformer
from service.engine.bundle import Bundle, load_bundle, sha256_of
from service.engine.manifest import (
    LANGUAGE_CODE,
    SCHEMA_VERSION,
    Architecture,
    Limits,
    Parity,
    Provenance,
    Quantization,
    SpecialIds,
    Tokenizers,
)
from service.engine.translator import Translator

ORIGIN = "huggingface-marian"


@dataclasses.dataclass(frozen=True)
class ConvertOptions:
    source: str
    target: str
    target_token: str | None = None
    int8: bool = False
    force: bool = False
    align_sample: Path | None = None
    parity_sentences: int = 50  # "at least 50": each one costs a greedy and a beam decode on both sides


def convert_hf(model_dir: Path, out: Path, options: ConvertOptions) -> Bundle:
    """Convert `model_dir` into the bundle directory `out`; raises ConversionError (or ExportError)."""
    check_destination(out, options.force)
    _check_options(options)
    # 1) read and check the checkpoint and the sample; transformers' model is the reference
    ckpt = read_checkpoint(model_dir, options.target_token)
    pairs = read_sample(options.align_sample) if options.align_sample else []
    reference = load_reference(ckpt)
    model = convert_weights(ckpt, reference)
    io = family_io(model.config)
    staged = staging_dir(out)
    try:
        # 2) the fp32 graphs, the tokenizer files and a provisional manifest the engine can load
        export_graphs(model, io, staged)
        for name in {"source.spm", "target.spm", *ckpt.vocab_files}:
            shutil.copy2(model_dir / name, staged / name)
        fields = _manifest_fields(ckpt, model, io, out.name, options)
        write_manifest(staged, fields)
        fp32 = Translator(load_bundle(staged))
        # 3) parity with transformers itself
        pairs = [p for p in pairs if _fits(fp32, p)]
        sources = _parity_sources(fp32, ckpt, pairs, options.parity_sentences)
        cap = _parity_cap(fp32, sources)
        fields["parity"] = _parity(reference, ckpt, fp32, sources, cap, options.target_token)
        # 4) int8, measured against fp32 (and the sample's references when there is a sample)
        if options.int8:
            references = [t for _, t in pairs[: len(sources)]] if pairs else None
            staged = quantize_staged(staged, out, fields, fp32, sources[: len(references or sources)], references, cap)
        else:
            invariant = is_batch_invariant(fp32, fp32.source_ids(sources), cap)
            fields["quantization"] = Quantization(mode="none", batch_invariant=invariant)
        write_manifest(staged, fields)
        # 5) the default attention view, and quality on the sample
        final = Translator(load_bundle(staged))
        fields["attention_view"] = sample_view(final, pairs)
        if pairs:
            beams = tuple(sorted({1, final.manifest.search.beam_size}))
            fields["quality"] = measure_quality(final, [s for s, _ in pairs], [t for _, t in pairs], "sample", beams)
        write_manifest(staged, fields)
        return place(staged, out, options.force)
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def _check_options(options: ConvertOptions) -> None:
    problems = [
        f"--{flag} {value!r} is not a language code (e.g. en, zh, de, pt_BR)"
        for flag, value in (("source", options.source), ("target", options.target))
        if not re.match(LANGUAGE_CODE, value)
    ]
    if options.parity_sentences < 1:
        problems.append(f"--parity-sentences must be at least 1, got {options.parity_sentences}")
    if problems:
        raise ConversionError(problems)


def _fits(translator: Translator, pair: Pair) -> bool:
    limits = translator.manifest.limits
    [src] = translator.src_tokenizer.encode_ids([pair[0]])
    [tgt] = translator.tgt_tokenizer.encode_ids([pair[1]])
    return len(src) < limits.max_source_tokens and len(tgt) < limits.max_target_tokens


def _parity_sources(translator: Translator, ckpt: MarianCheckpoint, pairs: list[Pair], n: int) -> list[str]:
    """The sample's sources, topped up with made-up ones to n sentences that fit the model's limits."""
    sources = [s for s, _ in pairs[:n]]
    limit = translator.manifest.limits.max_source_tokens
    for text in synthetic_sources(ckpt.directory / "source.spm", 4 * n):
        if len(sources) >= n:
            break
        if len(translator.src_tokenizer.encode_ids([text])[0]) < limit:
            sources.append(text)
    return sources


def _parity_cap(translator: Translator, sources: list[str]) -> int:
    """Both sides decode under this cap: the bundle's own, or 2 x the longest source + 10 if lower
    (a model that never stops, e.g. random weights, must not decode 500 tokens a sentence)."""
    longest = max(len(ids) for ids in translator.source_ids(sources))
    search, limits = translator.manifest.search, translator.manifest.limits
    return min(search.max_output_tokens or limits.max_target_tokens, limits.max_target_tokens, 2 * longest + 10)


def _parity(
    reference: MarianMTModel,
    ckpt: MarianCheckpoint,
    translator: Translator,
    sources: list[str],
    cap: int,
    target_token: str | None,
) -> Parity:
    tokenizer, prefix = reference_tokenizer(str(ckpt.directory), target_token)
    report = check_reference_parity(reference, tokenizer, prefix, translator, sources, cap)
    if report.failures():
        raise ConversionError(["parity with transformers failed", *report.failures()])
    return report.record()


def _manifest_fields(
    ckpt: MarianCheckpoint, model: Transformer, io: FamilyIO, name: str, options: ConvertOptions
) -> dict[str, Any]:
    cfg, positions = model.config, int(ckpt.config["max_position_embeddings"])
    return {
        "schema_version": SCHEMA_VERSION,
        "name": name,
        "source_lang": options.source,
        "target_lang": options.target,
        "architecture": Architecture(
            family="transformer",
            attention="multihead_scaled_dot",
            layers=cfg.dec_layers,
            heads=cfg.heads,
            encoder_layers=cfg.enc_layers,
            decoder_layers=cfg.dec_layers,
            parameters=count_parameters(model),
            config=dataclasses.asdict(cfg),
        ),
        "graphs": {"encoder": io.encoder, "decoder": io.decoder},
        "state": io.state,
        "special_ids": SpecialIds(pad=ckpt.pad_id, unk=ckpt.target_vocab["<unk>"], bos=ckpt.start_id, eos=ckpt.eos_id),
        "limits": Limits(max_source_tokens=positions, max_target_tokens=positions),
        "tokenizers": Tokenizers(
            source="source.spm",
            target="target.spm",
            kind="sentencepiece+vocab",
            source_vocab=ckpt.vocab_files[0],
            target_vocab=ckpt.vocab_files[1],
            target_token=options.target_token,
        ),
        "quantization": Quantization(mode="none"),
        "parity": Parity(
            max_abs_diff={}, tolerances={}, sentences=0, token_ids_identical=0.0, strings_identical=0.0, passed=False
        ),
        "search": search_defaults(ckpt),
        "provenance": Provenance(
            checkpoint_sha256=sha256_of(ckpt.weights),
            corpus_sha256=None,
            git_commit=git_commit(),
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
            versions=versions(),
            origin=ORIGIN,
            source_config=_source_config(ckpt),
        ),
    }


def _source_config(ckpt: MarianCheckpoint) -> dict[str, int | float | str | bool | None]:
    """The checkpoint's own settings that shaped the bundle, for the record."""
    keys = (
        "model_type",
        "activation_function",
        "d_model",
        "encoder_layers",
        "decoder_layers",
        "encoder_attention_heads",
        "encoder_ffn_dim",
        "vocab_size",
        "decoder_vocab_size",
        "share_encoder_decoder_embeddings",
        "tie_word_embeddings",
        "scale_embedding",
        "max_position_embeddings",
    )
    g = ckpt.generation
    return {
        "directory": ckpt.directory.name,
        "weights": ckpt.weights.name,
        **{k: ckpt.config[k] for k in keys},
        "num_beams": g.num_beams,
        "length_penalty": g.length_penalty,
        "max_length": g.max_length,
        "renormalize_logits": g.renormalize,
    }
