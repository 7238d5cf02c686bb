"""Rewrite an int8 bundle into today's batch-invariant form: from per-tensor dynamic quantization,
from the first per-row form (8-bit activations, uint8 x uint8; export/invariant_quant.py), or from
the seven-bit form spelled as elementwise operators (export/lean_quant.py), or with the second row
that exports gave one-row MatMuls over the padded source before the service padded every width to a
multiple of 8 (export/invariant_quant.py).

`python -m export.requantize bundles/en-zh [...]`. Its int8 weights are kept as they are (they are
the model's weights); each MatMul's activation becomes quantized per row, one-row MatMuls over the
padded source lose a second row an earlier export gave them (export/invariant_quant.py); a graph
already in today's form is written as it is. The manifest's quantization figures are measured
again as an export measures them, on the Tatoeba dev split, greedy: BLEU (against the fp32 BLEU
recorded at export), the speedup over fp32 arithmetic and batch invariance. The fp32
graphs are gone, so fp32 time is that of the same weights dequantized at session load (the
`weight_only` form: the fp32 graph's operations), and token agreement with fp32 is not known.
Test-split quality is `attention-mt rescore`'s to measure afterwards.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import onnx

from export.bundle_writer import ExportError, place, staging_dir, write_manifest
from export.invariant_quant import (
    first_per_row,
    make_padding_invariant,
    per_tensor,
    rewrite_matmuls,
    second_rows,
    weight_only,
)
from export.lean_quant import invariant_int8_file, spelled_long
from export.quantize import METHOD, measure_int8
from models.data import default_corpus_path, read_corpus, split_corpus
from service.engine.bundle import Bundle, load_bundle
from service.engine.translator import Translator


def requantize_bundle(bundle_dir: Path, corpus: Path | None = None, rounds: int = 5) -> Bundle:
    """Rewrite `bundle_dir` in place (atomically, checksums rewritten) and return it; the speedup is
    the best of `rounds` interleaved timings of each."""
    bundle = load_bundle(bundle_dir)
    m = bundle.manifest
    graphs = [m.graphs.encoder.file, m.graphs.decoder.file]
    if m.quantization.mode != "int8" or not _rewritable(bundle, graphs):
        older = "per tensor, first per row, not lean, or one-row MatMuls with a second row"
        raise ExportError(f"{bundle_dir}: not an int8 bundle in an older form ({older})")
    dev = split_corpus(read_corpus(corpus or default_corpus_path()))["dev"]
    sources, references = [p.text(m.source_lang) for p in dev], [p.text(m.target_lang) for p in dev]
    staged = staging_dir(bundle_dir)
    try:
        for name in m.files:
            if name in graphs:
                invariant_int8_file(bundle.file(name), staged / name)
            else:
                shutil.copy2(bundle.file(name), staged / name)
        fields = m.model_dump(exclude={"files"})
        write_manifest(staged, fields)
        int8 = Translator(load_bundle(staged))
        with tempfile.TemporaryDirectory() as tmp:
            fp32 = _dequantized(bundle, Path(tmp), fields)
            measured = measure_int8(fp32, int8, sources, references, m.target_lang, rounds)
        fields["quantization"] = measured.model_copy(
            update={
                "method": METHOD,
                "token_agreement": None,  # no fp32 graphs to agree with
                "bleu_fp32": m.quantization.bleu_fp32,  # of the original fp32 graphs, at export
                "bleu_delta": _delta(measured.bleu_int8, m.quantization.bleu_fp32),
                "size_fp32": m.quantization.size_fp32,
            }
        )
        write_manifest(staged, fields)
        return place(staged, bundle_dir, force=True)
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def _rewritable(bundle: Bundle, graphs: list[str]) -> bool:
    models = [onnx.load(str(bundle.file(g))) for g in graphs]
    return any(per_tensor(m) or first_per_row(m) or spelled_long(m) or second_rows(m) for m in models)


def _dequantized(bundle: Bundle, directory: Path, fields: dict[str, object]) -> Translator:
    """The bundle with its int8 weights dequantized when the session loads: fp32 arithmetic."""
    m = bundle.manifest
    for name in m.files:
        if name in (m.graphs.encoder.file, m.graphs.decoder.file):
            model = rewrite_matmuls(onnx.load(str(bundle.file(name))), weight_only)
            make_padding_invariant(model)
            onnx.save(model, str(directory / name))
        else:
            shutil.copy2(bundle.file(name), directory / name)
    write_manifest(directory, fields)
    return Translator(load_bundle(directory))


def _delta(int8: float | None, fp32: float | None) -> float | None:
    return round(int8 - fp32, 2) if int8 is not None and fp32 is not None else None


def main(argv: list[str]) -> int:
    for path in argv:
        q = requantize_bundle(Path(path)).manifest.quantization
        print(f"{path}: {q.model_dump_json()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
