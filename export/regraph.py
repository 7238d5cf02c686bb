"""Give a Transformer bundle today's decoder, in place: the one continuous batching needs (issue 16),
written op by op (issue 17, export/step_graph.py).

`python -m export.regraph bundles/en-zh [...]`. Bundles exported before it have a decoder whose
KV cache grows by one column a step, so every row of a batch must be at the same step and a new
sentence can only start a batch of its own. The new decoder (export/graph_io.py) takes each row's
position and writes into a fixed-width cache, so sentences join a running batch mid-decode.

The weights come back from the bundle's own graphs (export/bundle_import.py: an int8 bundle gives
its dequantized weights, which quantize to the same int8 values again), the decoder is exported
and quantized as `export` does, and the encoder and tokenizers are kept byte for byte. What the
new decoder changes is measured, not assumed: greedy token agreement with the old bundle on the
Tatoeba dev split is printed; test-split quality is `attention-mt rescore`'s to measure afterwards.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import torch
from torch import nn

from export.bundle_import import BundleImportError, GraphWeights, import_bundle
from export.bundle_writer import ExportError, place, staging_dir, write_manifest
from export.graph_io import family_io
from export.onnx_graphs import export_graphs
from export.quantize import quantize_graph
from export.step_graph import GRAPH_NAME
from models.config import RunConfig, model_config_from_dict
from models.data import default_corpus_path, read_corpus, split_corpus
from models.transformer import Transformer
from service.engine.bundle import Bundle, load_bundle
from service.engine.translator import Translator


def regraph_bundle(bundle_dir: Path) -> Bundle:
    """Rewrite `bundle_dir`'s decoder (atomically, checksums rewritten); a no-op when it needs none."""
    bundle = load_bundle(bundle_dir)
    m = bundle.manifest
    if m.architecture.family != "transformer":
        return bundle  # an RNN: no KV cache, rows join as they are
    if any(s.write == "slot" for s in m.state) and written(bundle.file(m.graphs.decoder.file)):
        return bundle  # the decoder of today already
    if m.tokenizers.kind != "sentencepiece":  # its weights are the checkpoint's: convert from that again
        raise ExportError(f"{bundle_dir}: a converted bundle; run `attention-mt convert-hf` on its checkpoint again")
    checkpoint = import_bundle(bundle_dir, RunConfig(model=model_config_from_dict(dict(m.architecture.config))))
    model = checkpoint.model
    assert isinstance(model, Transformer)  # import_bundle builds what the manifest describes
    if m.quantization.mode == "int8" and model.config.tie_output:
        _untie_output(model, bundle.file(m.graphs.decoder.file))
    io = family_io(model.config)
    staged = staging_dir(bundle_dir)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            # an int8 bundle keeps its int8 values: q, k and v fused would share one scale
            fp32 = export_graphs(model, io, Path(tmp), fuse_qkv=m.quantization.mode != "int8")[io.decoder.file]
            if m.quantization.mode == "int8":
                quantize_graph(fp32, staged / io.decoder.file)
            else:
                shutil.copy2(fp32, staged / io.decoder.file)
        for name in m.files:
            if name != m.graphs.decoder.file:
                shutil.copy2(bundle.file(name), staged / name)
        fields = m.model_dump(exclude={"files"})
        fields["graphs"]["decoder"] = io.decoder.model_dump()
        fields["state"] = [s.model_dump() for s in io.state]
        write_manifest(staged, fields)
        return place(staged, bundle_dir, force=True)
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def written(decoder: Path) -> bool:
    """Whether a decoder graph is export/step_graph.py's (not traced by torch.onnx.export)."""
    return onnx.load(str(decoder), load_external_data=False).graph.name == GRAPH_NAME


def _untie_output(model: Transformer, decoder: Path) -> None:
    """Quantization gave a tied output layer int8 values of its own, apart from the embedding's:
    keep them, so that the new decoder quantizes to the same int8 weights as the old one."""
    d, vocab = model.config.d_model, model.config.tgt_vocab
    graph = GraphWeights(decoder)
    names = [
        n.removesuffix("_quantized")
        for n, v in graph.inits.items()
        if n.endswith("_quantized") and v.shape == (d, vocab)
    ]
    if len(names) != 1:
        raise ExportError(f"{decoder}: expected one ({d}, {vocab}) output weight, found {len(names)}")
    weight = graph.tensor(names[0])
    assert weight is not None
    model.output.weight = nn.Parameter(torch.from_numpy(np.ascontiguousarray(weight.T)))  # (V, d)


def greedy_agreement(old: Translator, new: Translator, sources: list[str]) -> float:
    """Share of sentences whose greedy tokens the two translators agree on."""
    ids = old.source_ids(sources)
    greedy = old.options(beam_size=1)
    same = sum(
        a[0].tokens == b[0].tokens
        for i in range(0, len(ids), 32)
        for a, b in zip(old.search_ids(ids[i : i + 32], greedy), new.search_ids(ids[i : i + 32], greedy), strict=True)
    )
    return same / max(len(ids), 1)


def main(argv: list[str]) -> int:
    dev = split_corpus(read_corpus(default_corpus_path()))["dev"]
    for path in map(Path, argv):
        with tempfile.TemporaryDirectory() as tmp:
            before = Path(tmp) / path.name
            shutil.copytree(path, before)
            try:
                regraph_bundle(path)
            except (ExportError, BundleImportError) as exc:  # e.g. a converted bundle: convert it again
                print(f"{path}: {exc}", file=sys.stderr)
                return 2
            old, new = Translator(load_bundle(before)), Translator(load_bundle(path))
            sources = [p.text(old.manifest.source_lang) for p in dev]
            print(f"{path}: greedy tokens agree with the old decoder on {greedy_agreement(old, new, sources):.2%} "
                  f"of {len(sources)} dev sentences")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
