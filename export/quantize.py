"""int8 dynamic quantization of a bundle's graphs, and what it costs and buys.

Weights of MatMul (and embedding Gather) nodes become int8 with onnxruntime's dynamic
quantization; activations are quantized on the fly. The figures: greedy token agreement with
the fp32 graphs, BLEU on the same dev sentences, and the speedup, timed side by side.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import Any

from onnxruntime.quantization import QuantType, quantize_dynamic

from export.bundle_writer import staging_dir, write_manifest
from export.parity import greedy_ids
from models.metrics import score
from service.engine.bundle import load_bundle
from service.engine.manifest import Quantization
from service.engine.translator import Translator

OP_TYPES = ["MatMul", "Gather"]
METHOD = "onnxruntime dynamic quantization, int8 weights (per-tensor) for MatMul and Gather"


def quantize_graph(src: Path, dst: Path) -> None:
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantizer logs a generic pre-processing hint on every call
    try:
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, op_types_to_quantize=OP_TYPES)
    finally:
        root.setLevel(level)


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
