"""Batch-invariant int8 (issue 16): each candidate form against the per-tensor dynamic int8 graphs.

The shipped bundles were int8 with onnxruntime's dynamic quantization, one activation scale per
tensor. Their int8 weights are the model's weights, so every candidate is a rewrite of those
graphs (export/invariant_quant.py), taken from a git revision that still has them:

- `dynamic`: as shipped before (per-tensor activation scales), the baseline;
- `per_row`: one activation scale per row (7 bits), uint8 x int8 MatMulInteger (what exports now write);
- `weight_only`: int8 on disk, dequantized to fp32 when the session loads, fp32 MatMuls;
- `nbits`: com.microsoft MatMulNBits, 8 bits, int8 compute with per-block activation scales;
- `static`: one fixed scale per activation tensor, calibrated (min/max) on 512 training sentences.

All but `dynamic` also get the padding rewrite (sums over the source axis in order). Per bundle:
(1) invariance: test sentences decoded alone and in shuffled batches of 32 (mixed lengths), greedy
and beam 4: changed token sequences and the largest score difference; (2) greedy speed at batch 1
and 32 relative to `dynamic`, the forms interleaved (A B C A B C) in one run; (3) BLEU on the
Tatoeba test split, greedy and beam 4.

    python -m benchmarks.quant_invariance [--bundles en-zh zh-en en-zh-rnn] [--rev 20fab83]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import NodeProto, TensorProto, helper

from export.bundle_writer import write_manifest
from export.invariant_quant import (
    Graph,
    QuantizedMatMul,
    batch_invariant,
    find_quantized_matmuls,
    nbits,
    padding_invariant,
    rewrite_matmuls,
    weight_only,
)
from export.quality import measure_quality
from export.quantize import BatchingChanges, batching_changes
from models.data import Pair, default_corpus_path, read_corpus, split_corpus
from service.engine.bundle import Bundle, load_bundle
from service.engine.manifest import Manifest
from service.engine.translator import Translator
from service.settings import DEFAULT_BUNDLES

FORMS = ("dynamic", "per_row", "weight_only", "nbits", "static")
BASELINE_REV = "20fab83"  # the last commit whose bundles are per-tensor dynamic int8
CALIBRATION_SENTENCES = 512
Rewrite = Callable[[onnx.ModelProto], onnx.ModelProto]


# --- building the forms --------------------------------------------------------------------------


def baseline_bundles(rev: str, names: list[str], into: Path) -> Path:
    """bundles/<name> as of git revision `rev`, extracted into `into`."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", rev, *[f"bundles/{n}" for n in names]], capture_output=True, check=True
    ).stdout
    tar_path = into / "baseline.tar"
    tar_path.write_bytes(archive)
    with tarfile.open(tar_path) as tar:
        tar.extractall(into, filter="data")
    return into / "bundles"


def build(baseline: Bundle, out: Path, rewrite: Rewrite, manifest: Manifest) -> Bundle:
    """`baseline` with both graphs rewritten, as a bundle in `out`, described by `manifest` (the
    shipped one: the search users get)."""
    m = baseline.manifest
    out.mkdir(parents=True)
    for name in m.files:
        if name in (m.graphs.encoder.file, m.graphs.decoder.file):
            onnx.save(rewrite(onnx.load(str(baseline.file(name)))), str(out / name))
        else:
            shutil.copy2(baseline.file(name), out / name)
    write_manifest(out, manifest.model_dump(exclude={"files"}))
    return load_bundle(out)


def rewrite(form: str, baseline: Bundle, train: list[Pair], manifest: Manifest) -> Rewrite:
    """The rewrite of a dynamic-int8 graph into `form`."""
    if form == "static":
        ranges = calibrate(baseline, spread(train, CALIBRATION_SENTENCES), manifest)
        return lambda model: padding_invariant(rewrite_matmuls(model, static_builder(ranges)))
    builders = {"weight_only": weight_only, "nbits": nbits}
    if form in builders:
        return lambda model: padding_invariant(rewrite_matmuls(model, builders[form]))
    return batch_invariant if form == "per_row" else (lambda model: model)


# --- static scales: calibration and the form -----------------------------------------------------


class _Recorder:
    """An onnxruntime session that also fetches some tensors and keeps their min and max."""

    def __init__(self, session: Any, names: list[str], ranges: dict[str, tuple[float, float]]) -> None:
        self.session, self.names, self.ranges = session, names, ranges

    def run(self, output_names: list[str], feeds: dict[str, Any]) -> list[Any]:
        values = self.session.run(list(output_names) + self.names, feeds)
        for name, value in zip(self.names, values[len(output_names) :], strict=True):
            low, high = self.ranges.get(name, (0.0, 0.0))  # 0 always in range: zero stays exact
            self.ranges[name] = (min(low, float(value.min())), max(high, float(value.max())))
        return list(values[: len(output_names)])

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)


def calibrate(baseline: Bundle, pairs: list[Pair], manifest: Manifest) -> dict[str, tuple[float, float]]:
    """Min and max of every quantized MatMul's input, decoding `pairs` greedily in fp32."""
    ranges: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        weights = Translator(build(baseline, Path(tmp) / "b", lambda m: rewrite_matmuls(m, weight_only), manifest))
        for attr, file in (("encoder", "encoder.onnx"), ("decoder", "decoder.onnx")):
            model = onnx.load(str(baseline.file(file)))
            inputs = sorted({q.activation for q in find_quantized_matmuls(model.graph)})
            model = rewrite_matmuls(model, weight_only)
            model.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in inputs)
            session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            setattr(weights.model, attr, _Recorder(session, inputs, ranges))
        weights.translate_texts([p.text(manifest.source_lang) for p in pairs], weights.options(beam_size=1))
    return ranges


def static_builder(ranges: dict[str, tuple[float, float]]) -> Callable[[QuantizedMatMul, Graph], list[NodeProto]]:
    """x -> QuantizeLinear with its calibrated scale and zero point (uint8) -> u8 x u8 MatMulInteger."""

    def build_static(m: QuantizedMatMul, g: Graph) -> list[NodeProto]:
        low, high = ranges[m.activation]
        scale = max(high - low, 1e-8) / 255
        zero_point = int(np.clip(round(-low / scale), 0, 255))
        p, q = f"{m.activation}/static", f"{m.activation}/static/q"
        nodes = []
        if m.activation not in g.row_quantized:  # one QuantizeLinear per activation
            g.row_quantized.add(m.activation)
            g.add_constant(f"{p}/scale", np.array(scale, np.float32))
            g.add_constant(f"{p}/zero_point", np.array(zero_point, np.uint8))
            nodes.append(
                helper.make_node("QuantizeLinear", [m.activation, f"{p}/scale", f"{p}/zero_point"], [p + "/q"])
            )
        weight = g.array(m.weight).astype(np.int16) - int(g.array(m.weight_zero_point))
        w = g.add_constant(f"{m.weight}/u8", (weight + 128).astype(np.uint8))
        w_zero_point = g.add_constant("/static/u8_128", np.array(128, np.uint8))
        out_scale = np.array(scale * float(g.array(m.weight_scale)), np.float32)
        out = g.add_constant(f"{m.output}/static_scale", out_scale)
        return [
            *nodes,
            helper.make_node("MatMulInteger", [q, w, f"{p}/zero_point", w_zero_point], [f"{m.output}/int32"]),
            helper.make_node("Cast", [f"{m.output}/int32"], [f"{m.output}/float"], to=TensorProto.FLOAT),
            helper.make_node("Mul", [f"{m.output}/float", out], [m.output]),
        ]

    return build_static


# --- the measurements ----------------------------------------------------------------------------


def spread(pairs: list[Pair], n: int) -> list[Pair]:
    return [pairs[int(i * len(pairs) / n)] for i in range(n)]


def invariance(translator: Translator, src_ids: list[list[int]], beam: int) -> BatchingChanges:
    order = list(range(len(src_ids)))
    random.Random(0).shuffle(order)  # batches of mixed lengths
    return batching_changes(translator, [src_ids[i] for i in order], beam, batch_size=32)


def speeds(translators: dict[str, Translator], src_ids: list[list[int]], batch: int, rounds: int) -> dict[str, float]:
    """Median seconds to decode `src_ids` greedily in batches of `batch`, the forms interleaved."""
    times: dict[str, list[float]] = {name: [] for name in translators}
    for _ in range(rounds):
        for name, translator in translators.items():
            options = translator.options(beam_size=1)
            start = time.perf_counter()
            for i in range(0, len(src_ids), batch):
                translator.search_ids(src_ids[i : i + batch], options)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


@dataclass
class Row:
    bundle: str
    form: str
    size: int
    changed: dict[int, BatchingChanges]
    speed_b1: float = 0.0
    speed_b32: float = 0.0
    bleu: dict[int, float] | None = None


def measure_bundle(name: str, baseline: Bundle, work: Path, args: argparse.Namespace) -> list[Row]:
    splits = split_corpus(read_corpus(default_corpus_path()))
    shipped = load_bundle(DEFAULT_BUNDLES / name).manifest
    forms = {
        form: build(baseline, work / form, rewrite(form, baseline, splits["train"], shipped), shipped)
        for form in args.forms
    }
    translators = {form: Translator(b) for form, b in forms.items()}
    lang = baseline.manifest.source_lang
    src_ids = translators["dynamic"].source_ids([p.text(lang) for p in spread(splits["test"], args.sentences)])
    rows = []
    for form, translator in translators.items():
        size = sum(forms[form].file(g).stat().st_size for g in ("encoder.onnx", "decoder.onnx"))
        changed = {beam: invariance(translator, src_ids, beam) for beam in (1, 4)}
        rows.append(Row(name, form, size, changed))
        print(f"{name} {form}: invariance {changed}", flush=True)
    timing_ids = src_ids[:64]
    for batch, attr in ((1, "speed_b1"), (32, "speed_b32")):
        seconds = speeds(translators, timing_ids, batch, args.rounds)
        for row in rows:
            setattr(row, attr, seconds["dynamic"] / seconds[row.form])
    if not args.no_bleu:
        test = splits["test"]
        m = shipped
        sources, references = [p.text(m.source_lang) for p in test], [p.text(m.target_lang) for p in test]
        for row in rows:
            scores = measure_quality(translators[row.form], sources, references, "test", (1, 4))
            row.bleu = {s.beam: s.bleu for s in scores}
            print(f"{name} {row.form}: BLEU {row.bleu}", flush=True)
    return rows


def table(rows: list[Row], sentences: int) -> str:
    head = (
        f"| bundle | form | changed of {sentences} (greedy / beam 4) | max score diff | speed b1 | speed b32 "
        "| BLEU greedy | BLEU beam 4 | graphs MB |\n|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        diff = max(c.max_score_diff for c in r.changed.values())
        bleu = r.bleu or {}
        lines.append(
            f"| {r.bundle} | {r.form} | {r.changed[1].changed} / {r.changed[4].changed} | {diff:.2g} "
            f"| {r.speed_b1:.2f} | {r.speed_b32:.2f} | {bleu.get(1, '-')} | {bleu.get(4, '-')} | {r.size / 1e6:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundles", nargs="+", default=["en-zh", "zh-en", "en-zh-rnn"])
    parser.add_argument("--forms", nargs="+", default=list(FORMS), choices=FORMS)
    parser.add_argument("--rev", default=BASELINE_REV, help="git revision with per-tensor dynamic int8 bundles")
    parser.add_argument("--sentences", type=int, default=200, help="test sentences for the invariance check")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per form (median)")
    parser.add_argument("--no-bleu", action="store_true")
    args = parser.parse_args()
    if "dynamic" not in args.forms:
        args.forms.insert(0, "dynamic")  # the baseline the speeds are relative to
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = baseline_bundles(args.rev, args.bundles, Path(tmp))
        for name in args.bundles:
            rows += measure_bundle(name, load_bundle(root / name), Path(tmp) / "forms" / name, args)
    print(table(rows, args.sentences))


if __name__ == "__main__":
    main()
