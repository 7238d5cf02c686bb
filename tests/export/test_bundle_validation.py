"""A bad bundle is refused, and the error names the file and what is wrong with it."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from export.bundle_writer import ExportError, write_manifest
from export.pipeline import ExportOptions, export_run
from service.engine.bundle import BundleInvalid, load_bundle
from service.engine.translator import Translator


@pytest.fixture(scope="module")
def good_bundle(tmp_path_factory: pytest.TempPathFactory, trained_tiny_run: Path) -> Path:
    return export_run(trained_tiny_run, tmp_path_factory.mktemp("bundles") / "tiny", ExportOptions()).path


@pytest.fixture
def bundle(tmp_path: Path, good_bundle: Path) -> Path:
    copy = tmp_path / "bundle"
    shutil.copytree(good_bundle, copy)
    return copy


def edit_manifest(bundle: Path, change: Callable[[dict], None]) -> None:
    path = bundle / "manifest.json"
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def refused(bundle: Path, *fragments: str) -> None:
    with pytest.raises(BundleInvalid) as info:
        Translator(load_bundle(bundle))
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)


def test_the_good_bundle_loads(good_bundle: Path) -> None:
    assert Translator(load_bundle(good_bundle)).manifest.parity.passed


def test_corrupted_file(bundle: Path) -> None:
    data = bytearray((bundle / "decoder.onnx").read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, different bytes
    (bundle / "decoder.onnx").write_bytes(bytes(data))
    refused(bundle, "decoder.onnx: sha256 mismatch")


def test_missing_file(bundle: Path) -> None:
    (bundle / "en.model").unlink()
    refused(bundle, "en.model: missing")


def test_truncated_file(bundle: Path) -> None:
    (bundle / "encoder.onnx").write_bytes((bundle / "encoder.onnx").read_bytes()[:100])
    refused(bundle, "encoder.onnx: size 100 bytes, manifest says")


def test_checksum_mismatch_in_the_manifest(bundle: Path) -> None:
    edit_manifest(bundle, lambda d: d["files"]["zh.model"].update(sha256="0" * 64))
    refused(bundle, "zh.model: sha256 mismatch")


def test_every_problem_in_one_error(bundle: Path) -> None:
    (bundle / "en.model").unlink()
    (bundle / "zh.model").write_bytes(b"x")
    refused(bundle, "en.model: missing", "zh.model: size 1 bytes")


def test_unknown_manifest_field(bundle: Path) -> None:
    edit_manifest(bundle, lambda d: d.update(colour="blue"))
    refused(bundle, "manifest.json: colour: Extra inputs are not permitted")


def test_wrong_schema_version(bundle: Path) -> None:
    edit_manifest(bundle, lambda d: d.update(schema_version=2))
    refused(bundle, "schema_version must be 1")


def test_no_coercion_of_strings_to_numbers(bundle: Path) -> None:
    edit_manifest(bundle, lambda d: d["limits"].update(max_source_tokens="32"))
    refused(bundle, "limits.max_source_tokens")


def test_missing_manifest(bundle: Path) -> None:
    (bundle / "manifest.json").unlink()
    refused(bundle, "manifest.json: missing")


def test_graph_io_disagreeing_with_the_manifest(bundle: Path) -> None:
    def rename_and_retype(doc: dict) -> None:
        doc["graphs"]["decoder"]["outputs"][0]["name"] = "logits"
        doc["graphs"]["encoder"]["inputs"][0]["dtype"] = "float32"

    edit_manifest(bundle, rename_and_retype)
    refused(
        bundle,
        "decoder.onnx: output 'logits' is in the manifest but not in the graph",
        "decoder.onnx: output 'log_probs' is in the graph but not in the manifest",
        "encoder.onnx: input 'src_ids' is int64, manifest says float32",
    )


def test_a_slot_write_on_a_state_without_a_cache_axis(bundle: Path) -> None:
    def slot(doc: dict) -> None:
        doc["state"][0]["write"] = "slot"  # positions (or an RNN's hidden state): nowhere to write a slot

    edit_manifest(bundle, slot)
    refused(bundle, "write 'slot' needs a cache_len axis")


def test_an_unreadable_graph_with_a_matching_checksum(bundle: Path) -> None:
    (bundle / "decoder.onnx").write_bytes(b"not an onnx graph")
    doc = json.loads((bundle / "manifest.json").read_text())
    fields = {k: v for k, v in doc.items() if k != "files"}
    write_manifest(bundle, fields)  # checksums now agree: only onnxruntime can tell
    refused(bundle, "decoder.onnx: onnxruntime cannot load it")


def test_export_refuses_to_overwrite_without_force(trained_tiny_run: Path, good_bundle: Path) -> None:
    before = (good_bundle / "manifest.json").read_text()
    with pytest.raises(ExportError, match="exists; pass --force"):
        export_run(trained_tiny_run, good_bundle, ExportOptions(quality_split=None))
    assert (good_bundle / "manifest.json").read_text() == before


def test_export_with_force_replaces_atomically(trained_tiny_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "b"
    export_run(trained_tiny_run, out, ExportOptions(quality_split=None))
    export_run(trained_tiny_run, out, ExportOptions(quality_split=None, force=True))
    load_bundle(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]  # no staging or backup left


def test_a_failed_parity_check_writes_nothing(
    trained_tiny_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("export.parity.LOG_PROB_TOL", -1.0)
    monkeypatch.setattr("export.parity.ATTENTION_TOL", -1.0)
    with pytest.raises(ExportError) as info:
        export_run(trained_tiny_run, tmp_path / "b", ExportOptions(quality_split=None))
    message = str(info.value)
    assert "tier 1: decoder.log_probs" in message and "tier 1: decoder.cross_attention" in message
    assert list(tmp_path.iterdir()) == []
