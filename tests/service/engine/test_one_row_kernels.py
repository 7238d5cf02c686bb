"""What batch invariance rests on since the service pads sources (docs/benchmarks.md, 2026-12-06):
a decoder step's attention over the source, as the service's sessions run it (the scale not fused
into the MatMul), gives a row the same scores alone and among wider rows when every width is a
multiple of SOURCE_CHUNK; and the encoder is always given such widths."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from service.engine.onnx_model import SOURCE_CHUNK, SessionConfig, make_session, padded_source

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
    session = make_session(cross_scores(tmp_path / "scores.onnx"), SessionConfig(intra_op_threads=1, spinning=False))
    for length in range(1, 41):
        q = RNG.standard_normal((3, 4, 1, 64)).astype(np.float32)
        k = RNG.standard_normal((3, 4, length, 64)).astype(np.float32)
        chunk = -(-length // SOURCE_CHUNK) * SOURCE_CHUNK
        alone = scores(session, q[:1], k[:1], chunk)
        np.testing.assert_allclose(alone, (q[:1] @ k[:1].transpose(0, 1, 3, 2)) / 8, rtol=1e-5, atol=1e-5)
        for width in range(chunk, 65, SOURCE_CHUNK):
            assert np.array_equal(scores(session, q, k, width)[:1], alone), (length, width)


def test_every_source_is_padded_to_a_chunk() -> None:
    for length in (1, 7, 8, 9, 23):
        ids = np.arange(2 * length, dtype=np.int64).reshape(2, length)
        mask = np.zeros((2, length), bool)
        padded_ids, padded_mask = padded_source(ids, mask, pad_id=0)
        width = padded_ids.shape[1]
        assert width % SOURCE_CHUNK == 0 and length <= width < length + SOURCE_CHUNK
        assert np.array_equal(padded_ids[:, :length], ids) and (padded_ids[:, length:] == 0).all()
        assert not padded_mask[:, :length].any() and padded_mask[:, length:].all()
