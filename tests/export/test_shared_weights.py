"""A tied embedding stored once (export/shared_weights.py): both graphs point at one file, the
service gives both sessions one buffer (or, for a table read by row, only the rows each call
needs), and every translation stays what it was."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from export.bundle_writer import write_manifest
from export.shared_weights import SHARED_FILE
from service.engine.bundle import BundleInvalid, load_bundle
from service.engine.manifest import Manifest, RowIds
from service.engine.row_tables import fed
from service.engine.translator import Translator

TEXTS = ["the cat sees the dog .", "a dog runs .", "the big cat eats the small fish and the dog runs ."]


def fields_of(bundle: Path) -> dict[str, object]:
    """The manifest's fields, read without checking the files (a test has just changed one)."""
    text = (bundle / "manifest.json").read_text(encoding="utf-8")
    return Manifest.model_validate_json(text).model_dump(exclude={"files"})


def shared_copy(converted_bundles: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The converted en-de bundle (tied embeddings) rewritten with every shared tensor of 1 KB up."""
    out = tmp_path / "en-de"
    shutil.copytree(converted_bundles / "en-de", out)
    monkeypatch.setattr("export.shared_weights.MIN_BYTES", 1024)
    write_manifest(out, fields_of(out))
    return out


def results(bundle: Path) -> list[tuple[list[int], list[float], list[list[float]]]]:
    translator = Translator(load_bundle(bundle))
    found = []
    for beam in (1, 4):
        for nbest in translator.search_ids(translator.source_ids(TEXTS), translator.options(beam_size=beam)):
            h = nbest[0]
            found.append((h.tokens, h.token_log_probs, h.attention.tolist()))
    return found


def test_a_tied_embedding_is_stored_once_and_translates_the_same(
    converted_bundles: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = shared_copy(converted_bundles, tmp_path, monkeypatch)
    manifest = load_bundle(shared).manifest
    names = {(w.encoder, w.decoder) for w in manifest.shared_weights}
    assert any("embed" in a and "embed" in b for a, b in names), names
    for graph in ("encoder.onnx", "decoder.onnx"):
        external = {
            t.name
            for t in onnx.load(str(shared / graph), load_external_data=False).graph.initializer
            if t.data_location == onnx.TensorProto.EXTERNAL
        }
        role = 0 if graph == "encoder.onnx" else 1
        assert external == {pair[role] for pair in names}
    size = sum(f.stat().st_size for f in shared.iterdir())
    assert size < sum(f.stat().st_size for f in (converted_bundles / "en-de").iterdir())
    assert results(shared) == results(converted_bundles / "en-de")


def test_sharing_is_kept_by_a_rewrite_and_dropped_when_the_weights_differ(
    converted_bundles: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = shared_copy(converted_bundles, tmp_path, monkeypatch)
    first = load_bundle(shared).manifest.shared_weights
    data = (shared / SHARED_FILE).read_bytes()
    write_manifest(shared, fields_of(shared))  # as it is: nothing changes
    assert load_bundle(shared).manifest.shared_weights == first
    assert (shared / SHARED_FILE).read_bytes() == data
    # a tool rewrites the decoder with every weight inline (onnx.load resolves the shared file)
    onnx.save(onnx.load(str(shared / "decoder.onnx")), str(shared / "decoder.onnx"))
    write_manifest(shared, fields_of(shared))
    assert load_bundle(shared).manifest.shared_weights == first
    assert (shared / SHARED_FILE).read_bytes() == data
    # the decoder's copy of each shared weight changes: nothing is shared, the file goes
    decoder = onnx.load(str(shared / "decoder.onnx"))
    decoders = {w.decoder for w in first}
    for tensor in decoder.graph.initializer:
        if tensor.name in decoders:
            raw = bytearray(tensor.raw_data)
            raw[0] ^= 1
            tensor.raw_data = bytes(raw)
    onnx.save(decoder, str(shared / "decoder.onnx"))
    write_manifest(shared, fields_of(shared))
    assert load_bundle(shared).manifest.shared_weights == []
    assert not (shared / SHARED_FILE).exists()
    Translator(load_bundle(shared))  # the encoder's weights went back inline


def test_a_shared_embedding_is_read_by_row_and_never_held_whole(
    converted_bundles: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = shared_copy(converted_bundles, tmp_path, monkeypatch)
    [table] = [w for w in load_bundle(shared).manifest.shared_weights if "embed" in w.encoder]
    assert table.by_row == RowIds(encoder="src_ids", decoder="prev_tokens")
    translator = Translator(load_bundle(shared))
    model = translator.model
    for role, name in (("encoder", table.encoder), ("decoder", table.decoder)):
        assert model._shared[role][name].shape() == [1, *table.shape[1:]]  # a placeholder, not the table
    # the rows fed are the file's rows, bit for bit, and the ids index them
    whole = np.fromfile(shared / SHARED_FILE, dtype=table.dtype, count=int(np.prod(table.shape)), offset=table.offset)
    ids = np.array([[7, 3, 7, 0], [table.shape[0] - 1, 3, 3, 3]], dtype=np.int64)
    rows, renumbered = model._rows["encoder"]["src_ids"][1].rows(ids)
    assert rows.shape == (4, *table.shape[1:]) and renumbered.dtype == ids.dtype
    assert np.array_equal(rows[renumbered], whole.reshape(table.shape)[ids])
    with pytest.raises(ValueError, match=f"id {table.shape[0]} is outside the table's {table.shape[0]} rows"):
        model._rows["decoder"]["prev_tokens"][1].rows(np.array([table.shape[0]]))
    # a reader that feeds no rows runs on the whole table the graph points at
    plain = ort.InferenceSession(str(shared / "encoder.onnx"), providers=["CPUExecutionProvider"])
    src = np.array([[5, 9, 2, 9]], dtype=np.int64)
    feeds = {"src_ids": src, "src_pad_mask": np.zeros(src.shape, dtype=bool)}
    names = [o.name for o in plain.get_outputs()]
    for a, b in zip(plain.run(names, feeds), model.encoder.run(names, fed(model._rows["encoder"], feeds)), strict=True):
        assert np.array_equal(a, b)


def held_whole(bundle: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rewrite `bundle` as bundles were written before tables were read by row: no table inputs."""
    for graph in ("encoder.onnx", "decoder.onnx"):
        model = onnx.load(str(bundle / graph), load_external_data=False)
        initializers = {t.name for t in model.graph.initializer}
        kept = [i for i in model.graph.input if i.name not in initializers]
        del model.graph.input[:]
        model.graph.input.extend(kept)
        onnx.save(model, str(bundle / graph))
    with monkeypatch.context() as before_rows:
        before_rows.setattr("export.shared_weights._read_by_row", lambda *_: False)
        write_manifest(bundle, fields_of(bundle))
    assert all(w.by_row is None for w in load_bundle(bundle).manifest.shared_weights)


def test_a_bundle_shared_before_rows_is_read_by_row_after_a_rewrite(
    converted_bundles: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = shared_copy(converted_bundles, tmp_path, monkeypatch)
    held_whole(shared, monkeypatch)
    whole = results(shared)  # such a bundle still loads, its tables held whole
    write_manifest(shared, fields_of(shared))  # any tool's next write
    assert any(w.by_row is not None for w in load_bundle(shared).manifest.shared_weights)
    assert results(shared) == whole == results(converted_bundles / "en-de")


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"offset": 1 << 30}, "past its end"),
        ({"length": 7}, "is not"),
    ],
)
def test_a_shared_weight_that_does_not_fit_is_refused(
    converted_bundles: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: dict[str, int], problem: str
) -> None:
    shared = shared_copy(converted_bundles, tmp_path, monkeypatch)
    path = shared / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest["shared_weights"][0].update(change)
    path.write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(BundleInvalid, match=problem):
        load_bundle(shared)


def test_an_int8_conversion_reads_its_quantized_table_by_row(
    marian_checkpoints: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from export.convert_hf import ConvertOptions, convert_hf

    monkeypatch.setattr("export.shared_weights.MIN_BYTES", 1024)
    options = ConvertOptions("en", "de", target_token=">>deu<<", int8=True)
    bundle = convert_hf(marian_checkpoints["en-de"], tmp_path / "en-de-int8", options).path
    [table] = [w for w in load_bundle(bundle).manifest.shared_weights if "embed" in w.encoder]
    assert table.dtype != "float32" and table.by_row == RowIds(encoder="src_ids", decoder="prev_tokens")
    graphs = load_bundle(bundle).manifest.graphs
    for spec in (graphs.encoder, graphs.decoder):  # the quantizer left no input of the fp32 table behind
        model = onnx.load(str(bundle / spec.file), load_external_data=False)
        inputs = {i.name for i in model.graph.input} - {t.name for t in model.graph.initializer}
        assert inputs == {t.name for t in spec.inputs}
    by_row = results(bundle)
    held_whole(bundle, monkeypatch)
    assert results(bundle) == by_row


@pytest.mark.parametrize("strip_inputs", [False, True])
def test_a_table_the_graphs_cannot_be_fed_by_row_is_refused(
    converted_bundles: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, strip_inputs: bool
) -> None:
    shared = shared_copy(converted_bundles, tmp_path, monkeypatch)
    ids = {"encoder": "src_ids", "decoder": "prev_tokens"}
    if strip_inputs:  # graphs written before rows, a manifest that says otherwise
        held_whole(shared, monkeypatch)
    else:
        ids["encoder"] = "src_words"
    path = shared / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    for w in manifest["shared_weights"]:
        w["by_row"] = ids
    path.write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(BundleInvalid, match=re.escape("encoder cannot be fed model.src_embed.weight by the rows of")):
        Translator(load_bundle(shared))
