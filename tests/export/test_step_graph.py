"""The written decoder step (export/step_graph.py) against PyTorch's decode_step_at, for our models'
layout and a Marian one, with Q/K/V fused and apart; and the runtime's in-place cache write."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import helper

from export.graph_io import family_io
from export.onnx_graphs import OPSET, DecoderGraph, export_graphs, sample_inputs
from models.config import TransformerConfig
from models.transformer import Transformer
from service.engine.manifest import CACHE_AXIS, POSITIONS
from service.engine.onnx_model import write_slots

OURS = TransformerConfig(src_vocab=40, tgt_vocab=50, d_model=32, heads=4, ff_dim=64, enc_layers=2, dec_layers=2)
MARIAN = TransformerConfig(
    src_vocab=60, tgt_vocab=60, d_model=32, heads=2, ff_dim=48, enc_layers=1, dec_layers=2, norm="post",
    activation="swish", positions="halves", share_embeddings=True, logits_bias=True, scale_embedding=False,
)  # fmt: skip


@pytest.mark.parametrize(
    ("cfg", "fuse"), [(OURS, True), (OURS, False), (MARIAN, True)], ids=["ours", "apart", "marian"]
)
def test_the_written_step_computes_what_pytorch_does(cfg: TransformerConfig, fuse: bool, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    io = family_io(cfg)
    path = export_graphs(model, io, tmp_path, fuse_qkv=fuse)[io.decoder.file]
    graph = onnx.load(str(path))
    assert graph.ir_version == helper.find_min_ir_version_for(
        [helper.make_opsetid("", OPSET)]
    )  # older runtimes load it
    assert [n.op_type for n in graph.graph.node].count("Shape") == 1  # the cache's width; no shape arithmetic
    assert any("qkv_proj" in i.name for i in graph.graph.initializer) == fuse

    _, args = sample_inputs(model, io)  # a batch of rows at different positions in a 3-slot cache
    with torch.no_grad():
        want = dict(zip((t.name for t in io.decoder.outputs), DecoderGraph(model, io)(*args), strict=True))
    feeds = {t.name: a.numpy() for t, a in zip(io.decoder.inputs, args, strict=True)}
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = dict(zip((o.name for o in session.get_outputs()), session.run(None, feeds), strict=True))
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value.numpy(), atol=2e-5, rtol=0, err_msg=name)


def test_the_step_returns_only_its_own_entry_and_the_runtime_writes_it_in_place() -> None:
    io = family_io(OURS)
    slots = {s.input: s for s in io.state if s.write == "slot"}
    assert len(slots) == 2 * OURS.dec_layers and all(s.output.startswith("step_") for s in slots.values())
    assert io.decoder.input("past_key.0").shape.index(CACHE_AXIS) == 2
    assert POSITIONS in {s.input for s in io.state if s.write == "replace"}

    cache = np.zeros((3, 2, 5, 4), np.float32)  # (B, N, P, D)
    values = np.arange(3 * 2 * 4, dtype=np.float32).reshape(3, 2, 4) + 1  # (B, N, D)
    write_slots(cache, np.array([0, 4, 2]), values, batch_axis=0, slot_axis=2)
    for row, slot in enumerate([0, 4, 2]):
        np.testing.assert_array_equal(cache[row, :, slot], values[row])
    assert np.count_nonzero(cache) == values.size  # nothing else written
