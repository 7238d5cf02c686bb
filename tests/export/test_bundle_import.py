"""Bundle -> checkpoint import: the recovered weights are the bundle's own, fp32 exactly, int8 dequantized."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from export.bundle_import import BundleImportError, import_bundle
from export.pipeline import ExportOptions, export_run
from models.checkpoint import load_checkpoint
from models.config import RunConfig
from service.engine.tokenizer import Tokenizer
from tests.conftest import cli
from tests.export.test_export_families import CASES, make_run


@pytest.mark.parametrize("quantize", [None, "int8"])
def test_import_recovers_the_weights(
    quantize: str | None, tmp_path: Path, synthetic_corpus: Path, en_tokenizer: Tokenizer, zh_tokenizer: Tokenizer
) -> None:
    run = make_run(tmp_path / "run", "transformer", synthetic_corpus, en_tokenizer, zh_tokenizer)
    bundle = export_run(run, tmp_path / "bundle", ExportOptions(quantize=quantize, quality_split=None))
    original = load_checkpoint(run / "best.pt")
    imported = import_bundle(bundle.path, RunConfig(model=CASES["transformer"]))
    want, got = original.model.state_dict(), imported.model.state_dict()
    assert want.keys() == got.keys()
    for key, value in want.items():
        # int8: per-tensor symmetric scale, so every weight is within half a step (max|w| / 127 / 2); the
        # decoder's self-attention q, k and v are one tensor there (export/step_graph.py), with one scale
        fused = re.sub(r"\.[qkv]_proj\.", ".{}_proj.", key) if ".self_attn." in key and "decoder" in key else key
        group = [fused.format(p) for p in "qkv"] if "{}" in fused else [key]
        scale = max(float(want[k].abs().max()) for k in group)
        tol = 0.0 if quantize is None or value.ndim < 2 else scale / 127 / 2 + 1e-7
        assert torch.allclose(got[key], value, atol=tol, rtol=0), key
    assert imported.src_tokenizer.model_proto == original.src_tokenizer.model_proto
    assert imported.config.model == original.config.model


def test_import_cli_writes_a_checkpoint_that_fine_tunes(
    tmp_path: Path, synthetic_corpus: Path, en_tokenizer: Tokenizer, zh_tokenizer: Tokenizer
) -> None:
    run = make_run(tmp_path / "run", "transformer", synthetic_corpus, en_tokenizer, zh_tokenizer)
    export_run(run, tmp_path / "bundle", ExportOptions(quality_split=None))
    config = Path("models/configs/tiny.toml")
    done = cli("import-bundle", tmp_path / "bundle", "--config", config, "--out", tmp_path / "imported")
    assert done.returncode == 0, done.stderr
    want = load_checkpoint(run / "best.pt").config.model
    assert load_checkpoint(tmp_path / "imported" / "best.pt").config.model == want
    again = cli("import-bundle", tmp_path / "bundle", "--config", config, "--out", tmp_path / "imported")
    assert again.returncode == 2 and "exists" in again.stderr
    tuned = cli(
        "train", config, "--out", tmp_path / "tuned", "--corpus", synthetic_corpus,
        "--init-from", tmp_path / "imported" / "best.pt", "--max-steps", "3",
    )  # fmt: skip
    assert tuned.returncode == 0, tuned.stderr


def test_import_refuses_an_rnn_bundle_and_a_corrupt_one(
    tmp_path: Path, synthetic_corpus: Path, en_tokenizer: Tokenizer, zh_tokenizer: Tokenizer
) -> None:
    run = make_run(tmp_path / "rnn", "rnn-additive", synthetic_corpus, en_tokenizer, zh_tokenizer)
    bundle = export_run(run, tmp_path / "bundle", ExportOptions(quality_split=None))
    with pytest.raises(BundleImportError, match="transformer bundles only"):
        import_bundle(bundle.path, RunConfig(model=CASES["rnn-additive"]))
    (bundle.path / "decoder.onnx").write_bytes(b"not a graph")
    done = cli("import-bundle", bundle.path, "--config", "models/configs/tiny.toml", "--out", tmp_path / "x")
    assert done.returncode == 2 and "decoder.onnx" in done.stderr and "invalid" in done.stderr
