"""A decoder step's attentions fused into attention_mt.CacheAttention / CrossAttention
(service/engine/attention_fusion.py, ortops_attention.c): the written graph's values to rounding,
every row's bits the same whatever it is batched with (padding and unread cache slots never read),
attentions the pattern does not fit left alone, and the same translations."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from benchmarks.step_bench import feeds
from service.engine import graph_fusion
from service.engine.attention_fusion import SOURCE_ROWS, SOURCES
from service.engine.bundle import load_bundle
from service.engine.graph_fusion import DOMAIN, Fusions
from service.engine.onnx_model import OnnxSeq2Seq, SessionConfig
from tests.service.engine.test_quant_fusion import decoded, threaded

ATTENTION_ONLY = Fusions(rows=False, attention=True)
RNG = np.random.default_rng(5)


@pytest.fixture(autouse=True)
def built() -> None:
    if graph_fusion.library() is None:
        pytest.fail("the operator library is not built: pip install -e . needs a C compiler (see pyproject.toml)")


def session(model: bytes | str, folder: Path | None = None) -> ort.InferenceSession:
    """`folder`: where a fused graph's weights are (the file it was read from)."""
    options = ort.SessionOptions()
    options.register_custom_ops_library(graph_fusion.library())
    if folder is not None:
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(folder))
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def run(sess: ort.InferenceSession, inputs: dict[str, Any]) -> list[Any]:
    """`sess` on `inputs`, each row reading its own sentence where the fused graph indexes the sources."""
    if SOURCE_ROWS in {i.name for i in sess.get_inputs()} and SOURCE_ROWS not in inputs:
        inputs = inputs | {SOURCE_ROWS: np.arange(len(inputs["prev_tokens"]), dtype=np.int64)}
    return list(sess.run(None, inputs))


def fused_decoder(path: Path, fusions: Fusions = ATTENTION_ONLY) -> graph_fusion.FusedGraph:
    fused = graph_fusion.fused_graph(path, fusions=fusions)
    assert fused is not None
    return fused


def layers(bundle: Path) -> int:
    return int(load_bundle(bundle).manifest.architecture.decoder_layers)


@pytest.mark.parametrize("name", ["en-zh", "en-zh-int8"])
def test_every_layer_fuses_and_computes_the_graphs_values(bundle_dir: Path, name: str) -> None:
    path = bundle_dir / name / "decoder.onnx"
    fused = fused_decoder(path)
    n = layers(bundle_dir / name)
    assert fused.operators == {"CacheAttention": n, "CrossAttention": n}
    kinds = [node.op_type for node in onnx.load_from_string(fused.model).graph.node]
    assert not {"Softmax", "Where", "Transpose", "Range"} & set(kinds)
    written, ours = session(str(path)), session(fused.model, path.parent)
    names = [o.name for o in written.get_outputs()]
    for batch in (1, 5):
        inputs = feeds(written, batch, seed=batch)
        inputs["positions"] = RNG.integers(0, inputs["past_key.0"].shape[2] + 2, batch)  # past the cache too
        inputs["src_pad_mask"][0, 3:] = True
        for out, got, want in zip(names, run(ours, inputs), written.run(None, inputs), strict=True):
            assert got.shape == want.shape, out
            np.testing.assert_allclose(got, want, rtol=0, atol=2e-5, err_msg=out)


def padded(inputs: dict[str, Any], rows: int, width: int, slots: int) -> dict[str, Any]:
    """`inputs` (one row) as row 0 of `rows`, its source padded to `width` and its cache to `slots`:
    the padding, the other rows and the cache's unread slots are NaN or noise, which must not matter."""
    out = {}
    for name, x in inputs.items():
        shape = list(x.shape)
        shape[0] = rows
        if name.startswith("cross_"):
            shape[2] = width
        elif name.startswith("past_"):
            shape[2] = slots
        elif name == "src_pad_mask":
            shape[1] = width
        if x.dtype == np.float32:
            y = RNG.standard_normal(shape).astype(np.float32)
        elif name == "src_pad_mask":
            y = RNG.random(shape) < 0.3
        else:
            y = RNG.integers(0, min(8, slots), shape).astype(x.dtype)
        y[(0, *(slice(0, d) for d in x.shape[1:]))] = x[0]
        if name.startswith("past_"):
            y[0, :, int(inputs["positions"][0]) :] = np.nan  # slots the row may not read yet
        elif name.startswith("cross_"):
            y[0, :, x.shape[2] :] = np.nan
        elif name == "src_pad_mask":
            y[0, x.shape[1] :] = True
        out[name] = y
    return out


def test_a_row_gets_the_same_bits_alone_padded_or_beside_others(bundle_dir: Path) -> None:
    written = session(str(bundle_dir / "en-zh-int8" / "decoder.onnx"))
    ours = session(
        fused_decoder(bundle_dir / "en-zh-int8" / "decoder.onnx", Fusions()).model, bundle_dir / "en-zh-int8"
    )
    names = [o.name for o in ours.get_outputs()]
    alone = narrowed(feeds(written, 1, seed=3), width=9, slots=8)
    alone["positions"] = np.array([5], np.int64)
    alone["src_pad_mask"][0, 7:] = True
    want = dict(zip(names, run(ours, alone), strict=True))
    for rows, width, slots in ((1, 13, 16), (7, 24, 24), (32, 40, 9)):
        got = dict(zip(names, run(ours, padded(alone, rows, width, slots)), strict=True))
        for name, value in want.items():
            if name.endswith("_attention"):  # (rows, L, N, X): the row's weights, then zeros
                ours_, theirs = got[name][:1], value
                w = min(ours_.shape[-1], theirs.shape[-1])
                assert np.array_equal(ours_[..., :w], theirs[..., :w]), name
                assert not ours_[..., w:].any() and not theirs[..., w:].any(), name
            else:
                assert np.array_equal(got[name][:1], value), name


def narrowed(inputs: dict[str, Any], width: int, slots: int) -> dict[str, Any]:
    """`inputs` with the source `width` wide and the cache `slots` wide."""
    out = dict(inputs)
    for name, x in inputs.items():
        if name.startswith(("cross_", "past_")):
            out[name] = np.ascontiguousarray(x[:, :, : width if name.startswith("cross_") else slots])
        elif name == "src_pad_mask":
            out[name] = np.ascontiguousarray(x[:, :width])
    return out


def test_an_attention_read_elsewhere_stays_as_written(bundle_dir: Path, tmp_path: Path) -> None:
    """A graph output that is one layer's raw scores: that attention is not fused, the others are."""
    model = onnx.load(str(bundle_dir / "en-zh" / "decoder.onnx"))
    div = next(n for n in model.graph.node if n.op_type == "Div" and "cross_attn" in n.output[0])
    model.graph.output.append(helper.make_tensor_value_info(div.output[0], TensorProto.FLOAT, None))
    onnx.save(model, str(tmp_path / "decoder.onnx"))
    fused = fused_decoder(tmp_path / "decoder.onnx")
    n = layers(bundle_dir / "en-zh")
    assert fused.operators == {"CacheAttention": n} | ({"CrossAttention": n - 1} if n > 1 else {})
    written, ours = session(str(tmp_path / "decoder.onnx")), session(fused.model, tmp_path)
    assert SOURCE_ROWS not in {i.name for i in ours.get_inputs()}  # one attention's keys are read as written
    inputs = feeds(written, 3)
    for got, want in zip(run(ours, inputs), written.run(None, inputs), strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-5)


def test_the_operators_refuse_inputs_they_do_not_take() -> None:
    """Heads that do not make up q's width: an onnxruntime error naming the operator, not a crash."""
    node = helper.make_node("CrossAttention", ["q", "k", "v", "blocked", "scale"], ["mixed", "w"], domain=DOMAIN)
    graph = helper.make_graph(
        [node], "bad",
        [helper.make_tensor_value_info("q", TensorProto.FLOAT, [2, 6]),
         helper.make_tensor_value_info("k", TensorProto.FLOAT, [2, 2, 3, 4]),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, 2, 3, 4]),
         helper.make_tensor_value_info("blocked", TensorProto.BOOL, [2, 3]),
         helper.make_tensor_value_info("scale", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("mixed", "w")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(DOMAIN, 1)])
    model.ir_version = 10
    inputs = {"q": np.ones((2, 6), np.float32), "k": np.ones((2, 2, 3, 4), np.float32)}
    inputs |= {"v": inputs["k"], "blocked": np.zeros((2, 3), bool), "scale": np.array(2.0, np.float32)}
    with pytest.raises(Exception, match=r"attention_mt\.CrossAttention: q \(B, H\); key, value \(B', N, S, D\)"):
        session(model.SerializeToString()).run(None, inputs)


@pytest.mark.parametrize("name", ["en-zh", "en-zh-int8"])
def test_translations_fused_are_the_written_graphs_to_rounding(bundle_dir: Path, name: str) -> None:
    bundle = load_bundle(bundle_dir / name)
    fused = OnnxSeq2Seq(bundle, SessionConfig(intra_op_threads=1))
    written = OnnxSeq2Seq(bundle, SessionConfig(intra_op_threads=1, fuse_attention=False))
    assert "CacheAttention" in fused.fused["decoder"] and "CacheAttention" not in written.fused.get("decoder", {})
    for (tokens, log_probs, _, score), (want_tokens, want_log_probs, _, want_score) in zip(
        decoded(fused), decoded(written), strict=True
    ):
        assert tokens == want_tokens
        np.testing.assert_allclose(log_probs, want_log_probs, rtol=0, atol=1e-4)
        assert score == pytest.approx(want_score, abs=1e-4)


def test_the_avx2_and_portable_loops_give_the_same_bits(bundle_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The operators' loops as built for AVX2 and for any CPU, each chosen as a session registers the
    library (the choice is the library's, so each runs right after its session is made)."""
    path = bundle_dir / "en-zh" / "decoder.onnx"
    model = fused_decoder(path).model
    inputs = at_random_positions(path, 9, seed=2)
    inputs["src_pad_mask"][:, 11:] = True
    same_bits_either_way(monkeypatch, "ATTENTION_MT_PORTABLE_OPS", lambda: session(model, path.parent), inputs)


def test_rows_split_over_threads_give_the_same_bits(bundle_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From 8 rows on, each row is a task for the session's intra-op threads: 32 rows at their own
    positions, some source padding, get the bits the operators give in one thread
    (ATTENTION_MT_SERIAL_OPS, read as each session registers the library)."""
    path = bundle_dir / "en-zh-int8" / "decoder.onnx"
    model = fused_decoder(path, Fusions()).model
    inputs = at_random_positions(path, 32, seed=6)
    inputs["src_pad_mask"][::3, 9:] = True
    same_bits_either_way(monkeypatch, "ATTENTION_MT_SERIAL_OPS", lambda: threaded(model, path.parent), inputs)


def at_random_positions(path: Path, rows: int, seed: int) -> dict[str, Any]:
    """A step's random inputs for the decoder at `path`, each row at a random cache position (some
    past the cache's end)."""
    inputs = feeds(session(str(path)), rows, seed=seed)
    inputs["positions"] = RNG.integers(0, inputs["past_key.0"].shape[2] + 2, rows)
    return inputs


def same_bits_either_way(
    monkeypatch: pytest.MonkeyPatch, variable: str, make: Callable[[], ort.InferenceSession], inputs: dict[str, Any]
) -> None:
    """`make()`'s outputs with the library's `variable` at 1 and at 0 are the same bits. The library reads
    it as a session registers it, so each session runs right after it is made."""
    found = []
    for value in ("1", "0"):
        monkeypatch.setenv(variable, value)
        found.append(run(make(), inputs))
    for got, want in zip(*found, strict=True):
        assert np.array_equal(got, want)


def test_rows_of_one_sentence_read_one_copy_of_its_keys_and_values(bundle_dir: Path) -> None:
    """The fused graph takes SOURCE_ROWS: six rows (two sentences' beams) reading two sentences' keys
    and values get the bits they get with a copy per row."""
    path = bundle_dir / "en-zh-int8" / "decoder.onnx"
    fused = fused_decoder(path, Fusions())
    ours = session(fused.model, path.parent)
    given = {i.name: i.shape for i in ours.get_inputs()}
    assert given[SOURCE_ROWS] == ["batch"] and given["cross_key.0"][0] == SOURCES
    inputs = feeds(session(str(path)), 6, seed=4)
    inputs["src_pad_mask"][3:, 17:] = True
    sources = np.array([0, 0, 0, 1, 1, 1], np.int64)
    copied = {k: (v[sources] if k.startswith("cross_") else v) for k, v in inputs.items()}
    shared = {k: (v[:2] if k.startswith("cross_") else v) for k, v in inputs.items()}
    for got, want in zip(ours.run(None, shared | {SOURCE_ROWS: np.array([0, 0, 0, 1, 1, 1])}),
                         run(ours, copied), strict=True):  # fmt: skip
        assert np.array_equal(got, want)
    with pytest.raises(Exception, match=r"attention_mt\.CrossAttention: a source row out of range"):
        ours.run(None, shared | {SOURCE_ROWS: np.array([0, 0, 0, 1, 1, 2])})
