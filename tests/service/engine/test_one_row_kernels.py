"""What batch invariance rests on since the service pads sources (docs/benchmarks.md, 2026-12-06):
a decoder step's attention over the source, as the service's decoder sessions run it (the scale
not fused into the MatMul), gives a row the same scores alone and among wider rows when every width
is a multiple of SOURCE_CHUNK; and the decoder is always given such widths."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from service.engine.bundle import load_bundle
from service.engine.onnx_model import (
    DECODER_DISABLED_OPTIMIZERS,
    SOURCE_CHUNK,
    SessionConfig,
    make_session,
    rounded_up,
)
from service.engine.translator import Translator, pad_ids

RNG = np.random.default_rng(0)


def cross_scores(path: Path) -> str:
    """q (B, 4, 1, 64) @ k (B, 4, src_len, 64)^T / 8: a step's cross-attention scores."""
    q = helper.make_tensor_value_info("q", TensorProto.FLOAT, ["batch", 4, 1, 64])
    k = helper.make_tensor_value_info("k", TensorProto.FLOAT, ["batch", 4, "src_len", 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [
        helper.make_node("Transpose", ["k"], ["k_t"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "k_t"], ["qk"]),
        helper.make_node("Div", ["qk", "scale"], ["y"]),
    ]
    scale = helper.make_tensor("scale", TensorProto.FLOAT, [], [8.0])
    model = helper.make_model(
        helper.make_graph(nodes, "g", [q, k], [y], [scale]), opset_imports=[helper.make_opsetid("", 20)]
    )
    model.ir_version = 9
    onnx.save(model, str(path))
    return str(path)


def scores(session: ort.InferenceSession, q: np.ndarray, k: np.ndarray, width: int) -> np.ndarray:
    """The session's scores of q against k with its source axis zero-padded to `width`, cut back."""
    length = k.shape[2]
    keys = np.pad(k, [(0, 0), (0, 0), (0, width - length), (0, 0)])
    return np.asarray(session.run(None, {"q": q, "k": keys})[0])[..., :length]


def test_cross_attention_scores_are_exact_at_chunked_widths(tmp_path: Path) -> None:
    config = SessionConfig(intra_op_threads=1, spinning=False)
    session = make_session(
        cross_scores(tmp_path / "scores.onnx"), config, disabled_optimizers=DECODER_DISABLED_OPTIMIZERS
    )
    for length in range(1, 41):
        q = RNG.standard_normal((3, 4, 1, 64)).astype(np.float32)
        k = RNG.standard_normal((3, 4, length, 64)).astype(np.float32)
        chunk = rounded_up(length, SOURCE_CHUNK)
        alone = scores(session, q[:1], k[:1], chunk)
        np.testing.assert_allclose(alone, (q[:1] @ k[:1].transpose(0, 1, 3, 2)) / 8, rtol=1e-5, atol=1e-5)
        for width in range(chunk, 65, SOURCE_CHUNK):
            assert np.array_equal(scores(session, q, k, width)[:1], alone), (length, width)


def test_the_decoder_sees_every_source_padded_to_a_chunk(bundle_dir: Path) -> None:
    """encode() runs the encoder on the source as given and pads what the decoder reads with zeros,
    masked: what a join pads a shorter batch with."""
    model = Translator(load_bundle(bundle_dir / "en-zh")).model
    for length in (1, 7, 8, 9, 23):
        ids, mask = pad_ids([list(range(4, 4 + length)), [4, 5]])  # (2, S), S = max(length, 2)
        state = model.encode(ids, mask)
        S, width = ids.shape[1], state.src_pad_mask.shape[1]
        assert width % SOURCE_CHUNK == 0 and S <= width < S + SOURCE_CHUNK
        assert np.array_equal(state.src_pad_mask[:, :S], mask) and state.src_pad_mask[:, S:].all()
        raw = dict(
            zip(
                (o.name for o in model.encoder.get_outputs()),
                model.encoder.run(None, {"src_ids": ids, "src_pad_mask": mask}),
                strict=True,
            )
        )
        for name, x in state.statics.items():  # cross-attention keys and values: (B, N, S, D)
            assert x.shape[2] == width and np.array_equal(x[:, :, :S], raw[name]) and not x[:, :, S:].any()
