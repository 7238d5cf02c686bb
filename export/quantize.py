"""int8 quantization of a bundle's graphs, batch-invariant, and what it costs and buys.

Weights of MatMul (and embedding Gather) nodes become int8 with onnxruntime's dynamic
quantization; then every MatMul's activation is quantized row by row on the fly, instead of with
one scale for the whole batch (export/invariant_quant.py), so a sentence's translation does not
depend on what it is batched with. The figures: greedy token agreement with the fp32 graphs, BLEU
on the same dev sentences, the speedup, timed side by side, and a check of batch invariance.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onnxruntime.quantization import QuantType, quantize_dynamic

from export.bundle_writer import staging_dir, write_manifest
from export.lean_quant import invariant_int8_file
from export.parity import greedy_ids
from models.metrics import score
from service.engine.bundle import load_bundle
from service.engine.manifest import Quantization
from service.engine.translator import Translator

OP_TYPES = ["MatMul", "Gather"]
METHOD = (
    "int8 weights (per-tensor, onnxruntime quantize_dynamic) for MatMul and Gather; each MatMul's activation "
    "quantized per row to 7 bits (max |x| of the row over 63, ReLU outputs 0-127), uint8 x int8 MatMulInteger "
    "(exact on AVX2 too): batch-invariant"
)
INVARIANCE_SENTENCES = 12  # decoded alone and in one mixed batch at export: seconds
INVARIANCE_TOKENS = 16  # a batch's effect shows in the first steps; a random model never stops


def quantize_graph(src: Path, dst: Path) -> None:
    """`src` (fp32) -> `dst` (int8, activations quantized per row)."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantizer logs a generic pre-processing hint on every call
    try:
        with tempfile.TemporaryDirectory() as tmp:
            dynamic = Path(tmp) / src.name
            quantize_dynamic(str(src), str(dynamic), weight_type=QuantType.QInt8, op_types_to_quantize=OP_TYPES)
            invariant_int8_file(dynamic, dst)
    finally:
        root.setLevel(level)


@dataclass(frozen=True)
class BatchingChanges:
    """What batching did to sentences, against each decoded alone."""

    sentences: int
    changed: int  # token sequences that differ
    max_score_diff: float  # the largest |score difference| among the others

    @property
    def invariant(self) -> bool:
        return self.changed == 0 and self.max_score_diff == 0.0


def batching_changes(
    translator: Translator,
    src_ids: list[list[int]],
    beam_size: int,
    batch_size: int = 32,
    max_output_tokens: int | None = None,
) -> BatchingChanges:
    """Decode each sentence alone, then in batches of `batch_size` in the given order (the caller
    mixes lengths), and compare the best hypotheses."""
    options = translator.options(beam_size=beam_size, max_output_tokens=max_output_tokens)
    alone = [translator.search_ids([ids], options)[0][0] for ids in src_ids]
    batched = [
        nbest[0]
        for start in range(0, len(src_ids), batch_size)
        for nbest in translator.search_ids(src_ids[start : start + batch_size], options)
    ]
    pairs = list(zip(alone, batched, strict=True))
    same = [(a, b) for a, b in pairs if a.tokens == b.tokens]
    diff = max((abs(a.score - b.score) for a, b in same), default=0.0)
    return BatchingChanges(len(pairs), len(pairs) - len(same), diff)


def is_batch_invariant(translator: Translator, src_ids: list[list[int]], max_output_tokens: int | None = None) -> bool:
    """Whether some sentences spread over `src_ids` (mixed lengths) decode the same alone and in one
    batch, greedy and beam 4, up to INVARIANCE_TOKENS tokens: tokens and scores exactly."""
    n = INVARIANCE_SENTENCES
    sample = src_ids[:: max(1, len(src_ids) // n)][:n]
    cap = min(max_output_tokens or INVARIANCE_TOKENS, INVARIANCE_TOKENS)
    return all(batching_changes(translator, sample, beam, n, cap).invariant for beam in (1, 4))


def _timed(translator: Translator, src_ids: list[list[int]], cap: int | None) -> tuple[list[list[int]], float]:
    start = time.perf_counter()
    ids = greedy_ids(translator, src_ids, max_output_tokens=cap)
    return ids, time.perf_counter() - start


def measure_int8(
    fp32: Translator,
    int8: Translator,
    sources: list[str],
    references: list[str] | None,
    target_lang: str,
    rounds: int = 2,
    max_output_tokens: int | None = None,
) -> Quantization:
    """Compare the int8 graphs with fp32 on the same sentences, interleaving the timed runs.

    Without references (a converted model with no parallel sample), the int8 output is scored
    against the fp32 output: how much of the fp32 translation int8 keeps."""
    src_ids = fp32.source_ids(sources)
    fp32_times, int8_times = [], []
    for _ in range(rounds):  # A B A B: both see the same machine state
        fp32_ids, t = _timed(fp32, src_ids, max_output_tokens)
        fp32_times.append(t)
        int8_ids, t = _timed(int8, src_ids, max_output_tokens)
        int8_times.append(t)
    decode = fp32.tgt_tokenizer.decode_text
    fp32_texts = [decode(x) for x in fp32_ids]
    bleu_int8 = score([decode(x) for x in int8_ids], references or fp32_texts, target_lang)["bleu"]
    bleu_fp32 = score(fp32_texts, references, target_lang)["bleu"] if references else None
    graphs = [fp32.manifest.graphs.encoder.file, fp32.manifest.graphs.decoder.file]
    return Quantization(
        mode="int8",
        method=METHOD,
        token_agreement=sum(a == b for a, b in zip(fp32_ids, int8_ids, strict=True)) / max(len(src_ids), 1),
        bleu_fp32=bleu_fp32,
        bleu_int8=bleu_int8,
        bleu_delta=round(bleu_int8 - bleu_fp32, 2) if bleu_fp32 is not None else None,
        bleu_reference="references" if references else "fp32_output",
        speedup=round(min(fp32_times) / max(min(int8_times), 1e-9), 3),
        size_fp32=sum(fp32.bundle.file(g).stat().st_size for g in graphs),
        size_int8=sum(int8.bundle.file(g).stat().st_size for g in graphs),
        batch_invariant=is_batch_invariant(int8, src_ids, max_output_tokens),
    )


def quantize_staged(
    staged: Path,
    out: Path,
    fields: dict[str, Any],
    fp32: Translator,
    sources: list[str],
    references: list[str] | None,
    max_output_tokens: int | None = None,
) -> Path:
    """Quantize a staged bundle's graphs into a second staging directory beside `out`, record the
    measured change in `fields`, and return the new directory (the fp32 one is removed)."""
    int8_dir = staging_dir(out)
    try:
        for graph in (fp32.manifest.graphs.encoder.file, fp32.manifest.graphs.decoder.file):
            quantize_graph(staged / graph, int8_dir / graph)
        for name in fp32.manifest.tokenizers.files():
            shutil.copy2(staged / name, int8_dir / name)
        write_manifest(int8_dir, fields)
        int8 = Translator(load_bundle(int8_dir))
        target = fp32.manifest.target_lang
        fields["quantization"] = measure_int8(fp32, int8, sources, references, target, 2, max_output_tokens)
    except BaseException:
        shutil.rmtree(int8_dir, ignore_errors=True)
        raise
    shutil.rmtree(staged, ignore_errors=True)
    return int8_dir
