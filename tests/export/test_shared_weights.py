"""A tied embedding stored once (export/shared_weights.py): both graphs point at one file, the
service gives both sessions one buffer, and every translation stays what it was."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
import pytest

from export.bundle_writer import write_manifest
from export.shared_weights import SHARED_FILE
from service.engine.bundle import BundleInvalid, load_bundle
from service.engine.manifest import Manifest
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
