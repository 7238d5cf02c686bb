"""Bundles from before continuous batching: they still serve (later sentences in batches of their
own), and `export.regraph` gives them the new decoder with the same int8 weights and (up to the
order of one sum) the same outputs."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx
import pytest
from onnx import numpy_helper

from export.bundle_writer import ExportError
from export.convert_hf import ConvertOptions, convert_hf
from export.graph_io import FamilyIO, family_io
from export.pipeline import ExportOptions, export_run
from export.regraph import greedy_agreement, regraph_bundle
from models.config import ModelConfig
from service.engine.bundle import load_bundle
from service.engine.manifest import CACHE_AXIS, POSITIONS, StateSpec
from service.engine.tokenizer import Tokenizer
from service.engine.translator import Translator
from service.settings import DEFAULT_BUNDLES
from tests.export.test_export_families import make_run
from tests.support.synthetic import synthetic_pairs


def legacy_io(cfg: ModelConfig) -> FamilyIO:
    """The I/O table exports used before: no positions, a cache that grows by one column a step and
    comes back whole."""
    io = family_io(cfg)
    inputs = [
        t.model_copy(update={"shape": ["past_len" if d == CACHE_AXIS else d for d in t.shape]})
        for t in io.decoder.inputs
        if t.name != POSITIONS
    ]
    past = [t for t in inputs if t.name.startswith("past_")]
    present = [t.model_copy(update={"name": t.name.replace("past_", "present_"),
                                    "shape": ["present_len" if d == "past_len" else d for d in t.shape]})
               for t in past]  # fmt: skip
    outputs = [t for t in io.decoder.outputs if not t.name.startswith(("step_", f"next_{POSITIONS}"))]
    outputs = [
        o.model_copy(update={"shape": ["present_len" if d == CACHE_AXIS else d for d in o.shape]}) for o in outputs
    ]
    decoder = io.decoder.model_copy(update={"inputs": inputs, "outputs": outputs + present})
    state = [StateSpec(input=p.name, output=q.name, init="empty") for p, q in zip(past, present, strict=True)]
    return FamilyIO(io.encoder, decoder, state, io.statics)


def int8_weights(path: Path) -> list[bytes]:
    inits = onnx.load(str(path)).graph.initializer
    return sorted(numpy_helper.to_array(i).tobytes() for i in inits if i.data_type == onnx.TensorProto.UINT8)


def test_an_old_bundle_serves_and_regraphs_to_its_translations(
    tmp_path: Path,
    synthetic_corpus: Path,
    en_tokenizer: Tokenizer,
    zh_tokenizer: Tokenizer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = make_run(tmp_path / "run", "transformer", synthetic_corpus, en_tokenizer, zh_tokenizer)
    with monkeypatch.context() as patch:
        patch.setattr("export.pipeline.family_io", legacy_io)
        old = export_run(run, tmp_path / "old", ExportOptions(quantize="int8", quality_split=None))
    shutil.copytree(old.path, tmp_path / "new")

    before = Translator(old)
    assert not before.model.joinable  # every row at one position: no joining mid-decode
    ids = before.source_ids([en for en, _ in synthetic_pairs()[::40]])
    greedy = before.options(beam_size=1)
    running = before.begin(ids[:3], greedy)
    running.step()
    assert running.join(before.begin(ids[3:], greedy)) is None  # the scheduler starts another batch

    new = regraph_bundle(tmp_path / "new")
    after = Translator(new)
    assert after.model.joinable and POSITIONS in {s.input for s in new.manifest.state}
    assert int8_weights(new.file("decoder.onnx")) == int8_weights(old.file("decoder.onnx"))  # tied output too
    assert new.file("encoder.onnx").read_bytes() == old.file("encoder.onnx").read_bytes()
    sources = [en for en, _ in synthetic_pairs()[::7]]
    # the written step adds its own slot's value after the others (it never copies the cache to write
    # it first), so a near-tie of this tiny model can flip: the shipped bundles agreed on 99.9-100%
    assert greedy_agreement(before, after, sources) >= 0.9
    assert regraph_bundle(tmp_path / "new").manifest == new.manifest  # a second run changes nothing


def test_regraph_leaves_an_rnn_alone_and_sends_a_converted_bundle_back_to_convert_hf(
    marian_checkpoints: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rnn = DEFAULT_BUNDLES / "en-zh-rnn"
    assert regraph_bundle(rnn).manifest == load_bundle(rnn).manifest  # no KV cache: nothing to do
    with monkeypatch.context() as patch:
        patch.setattr("export.convert_hf.family_io", legacy_io)
        convert_hf(marian_checkpoints["en-de"], tmp_path / "en-de", ConvertOptions("en", "de", target_token=">>deu<<"))
    with pytest.raises(ExportError, match="convert-hf"):
        regraph_bundle(tmp_path / "en-de")
