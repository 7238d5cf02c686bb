"""Synthetic pairs (back-translation): a real bundle translates the training split, and a run adds
them to its training data, never a pair that shares a sentence with dev or test."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from benchmarks.channel_rerank import candidates, reranked
from models.config import RNNConfig, RunConfig, TrainConfig
from models.data import read_corpus, split_corpus
from models.synthetic import main, training_pairs, translate_side, write_pairs
from models.train import prepare_data
from service.engine.bundle import load_bundle
from service.engine.reranking import N_BEST
from service.engine.translator import Translator
from service.settings import DEFAULT_BUNDLES


def test_a_bundle_translates_the_training_split_with_attribution_kept(
    bundle_dir: Path, synthetic_corpus: Path, tmp_path: Path
) -> None:
    pairs = training_pairs(synthetic_corpus, None)[:40]
    synthetic = translate_side(pairs, bundle_dir / "en-zh", beam=1)
    assert 0 < len(synthetic) <= len(pairs)
    originals = {p.en: p for p in pairs}
    for pair in synthetic:  # the English side is the original's; the Chinese is the bundle's
        assert pair.en in originals and pair.zh
        assert pair.attribution.startswith(originals[pair.en].attribution)
        assert pair.attribution.endswith("(machine translation by en-zh)")
    write_pairs(synthetic, tmp_path / "bt.tsv")
    assert read_corpus(tmp_path / "bt.tsv") == synthetic


def test_reranked_pairs_are_what_a_reranked_request_picks(synthetic_corpus: Path) -> None:
    pairs = training_pairs(synthetic_corpus, None)[:6]
    synthetic = translate_side(pairs, DEFAULT_BUNDLES / "zh-en", beam=1, reverse=DEFAULT_BUNDLES / "en-zh")
    forward, reverse = (Translator(load_bundle(DEFAULT_BUNDLES / name)) for name in ("zh-en", "en-zh"))
    weight = forward.manifest.search.rerank_weight
    expected = reranked(candidates(forward, reverse, [p.zh for p in pairs], N_BEST), weight)
    assert [p.en for p in synthetic] == expected  # the benchmark's own choice, measured at +1.3 BLEU
    assert [p.zh for p in synthetic] == [p.zh for p in pairs]
    assert all(p.attribution.endswith("(machine translation by zh-en, reranked by en-zh)") for p in synthetic)


def test_the_command_writes_a_corpus_from_the_training_split_only(
    bundle_dir: Path, synthetic_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bt" / "en-zh.tsv"
    bundle = bundle_dir / "en-zh"
    main(["--bundle", str(bundle), "--out", str(out), "--corpus", str(synthetic_corpus), "--no-real-text"])
    splits = split_corpus(read_corpus(synthetic_corpus))
    written = read_corpus(out)
    assert {p.en for p in written} <= {p.en for p in splits["train"]}
    assert len(written) > 0.9 * len(splits["train"])
    assert f"-> {out}" in capsys.readouterr().err


def test_a_run_adds_synthetic_pairs_except_those_touching_held_out_sentences(
    synthetic_corpus: Path, tmp_path: Path
) -> None:
    splits = split_corpus(read_corpus(synthetic_corpus))
    test_zh, dev_en = splits["test"][0].zh, splits["dev"][0].en
    extra = [("A brand new sentence.", "一个全新的句子。"), ("Another new one.", test_zh), (dev_en, "开发句子。")]
    synthetic = tmp_path / "bt.tsv"
    synthetic.write_text("".join(f"{en}\t{zh}\tCC-BY (machine translation)\n" for en, zh in extra), encoding="utf-8")
    base = RunConfig(model=RNNConfig(), train=TrainConfig())
    with_synthetic = dataclasses.replace(base, data=dataclasses.replace(base.data, synthetic=str(synthetic)))
    plain = prepare_data(base, synthetic_corpus, None)
    mixed = prepare_data(with_synthetic, synthetic_corpus, (plain.src_tokenizer, plain.tgt_tokenizer))
    assert len(mixed.src_ids) == len(plain.src_ids) + 1  # only the pair touching no held-out sentence
    assert mixed.corpus_sha256 != plain.corpus_sha256  # a resumed run notices the added data


def test_the_command_names_a_missing_bundle(synthetic_corpus: Path, tmp_path: Path) -> None:
    args = ["--bundle", str(tmp_path / "nope"), "--out", str(tmp_path / "bt.tsv"), "--corpus", str(synthetic_corpus)]
    with pytest.raises(SystemExit, match=r"models\.synthetic: .*nope"):
        main([*args, "--no-real-text"])
    assert not (tmp_path / "bt.tsv").exists()
