"""Every model family and score function exports, and all three parity tiers pass."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from export.pipeline import ExportOptions, export_run
from models.checkpoint import Checkpoint, save_checkpoint
from models.config import SCORE_FUNCTIONS, RunConfig
from models.data import file_sha256
from models.registry import FAMILIES, build_model
from service.engine.bundle import load_bundle
from service.engine.tokenizer import Tokenizer
from service.engine.translator import SearchOptions, Translator
from tests.support.families import tiny_configs

CASES = tiny_configs(dropout=0.1)  # dropout must be off in the graphs and in the PyTorch reference


def make_run(run: Path, case: str, corpus: Path, en: Tokenizer, zh: Tokenizer, seed: int = 0) -> Path:
    """A checkpoint of a random tiny model with the synthetic tokenizers, as `train` would write it."""
    config = dataclasses.replace(CASES[case], src_vocab=en.vocab_size, tgt_vocab=zh.vocab_size)
    torch.manual_seed(seed)
    model = build_model(config).eval()
    progress = {"corpus": str(corpus), "corpus_sha256": file_sha256(corpus), "best_epoch": 1}
    save_checkpoint(run / "best.pt", Checkpoint(RunConfig(model=config), model, en, zh, progress))
    return run


def test_every_family_and_score_has_an_export_case() -> None:
    assert {c.family for c in CASES.values()} == set(FAMILIES)
    assert {getattr(c, "attention", None) for c in CASES.values()} - {None} == set(SCORE_FUNCTIONS)


@pytest.mark.parametrize("case", CASES)
def test_export_passes_all_three_parity_tiers(
    case: str, tmp_path: Path, synthetic_corpus: Path, en_tokenizer: Tokenizer, zh_tokenizer: Tokenizer
) -> None:
    run = make_run(tmp_path / "run", case, synthetic_corpus, en_tokenizer, zh_tokenizer)
    bundle = export_run(run, tmp_path / "bundle", ExportOptions(quality_beams=(1,)))
    parity = bundle.manifest.parity
    assert parity.passed
    assert parity.sentences == 200  # the synthetic corpus has fewer dev pairs: topped up from the rest
    assert parity.token_ids_identical == 1.0 and parity.strings_identical == 1.0
    assert all(parity.max_abs_diff[k] <= parity.tolerances[k] for k in parity.max_abs_diff)
    assert "decoder.log_probs" in parity.max_abs_diff and "decoder.cross_attention" in parity.max_abs_diff
    # the bundle is self-describing
    m = bundle.manifest
    cfg = CASES[case]
    assert m.architecture.family == cfg.family
    assert m.architecture.attention == getattr(cfg, "attention", "multihead_scaled_dot")
    assert m.quality and m.quality[0].sentences > 0
    assert set(m.files) == {"encoder.onnx", "decoder.onnx", "en.model", "zh.model"}
    assert json.loads((bundle.path / "manifest.json").read_text())["schema_version"] == 1
    # and it translates through the service's own engine
    [text] = Translator(load_bundle(bundle.path)).translate_texts(["Tom chases Jerry."], SearchOptions(beam_size=2))
    assert isinstance(text, str)
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert not leftovers, leftovers


def test_transformer_bundle_reports_every_layer_and_head(
    tmp_path: Path, synthetic_corpus: Path, en_tokenizer: Tokenizer, zh_tokenizer: Tokenizer
) -> None:
    run = make_run(tmp_path / "run", "transformer", synthetic_corpus, en_tokenizer, zh_tokenizer)
    bundle = export_run(run, tmp_path / "b", ExportOptions(quality_split=None))
    translator = Translator(bundle)
    src = translator.source_ids(["Tom chases Jerry.", "Mary sees John again."])
    [[hyp], _] = translator.search_ids(src, SearchOptions())
    cfg = CASES["transformer"]
    assert hyp.attention.shape == (len(hyp.tokens), cfg.dec_layers, cfg.heads, max(len(s) for s in src))
    state = bundle.manifest.state
    # each row's position, then a fixed-width KV cache: rows at different steps share a batch
    assert [s.input for s in state][:3] == ["positions", "past_key.0", "past_value.0"]
    assert all(s.init == "empty" for s in state)
    assert bundle.manifest.graphs.decoder.input("past_key.0").shape[2] == "cache_len"


def test_an_export_records_its_search_against_loops(bundle_dir: Path) -> None:
    search = load_bundle(bundle_dir / "en-zh").manifest.search
    assert search.no_repeat_ngram == 3 and search.max_output_slack == 5
    assert search.max_output_ratio is not None and 0.5 < search.max_output_ratio < 5  # from the training split
