"""Guided alignment: eflomal links over token ids, their symmetrisation, the loss, and a guided run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from models.alignments import align, grow_diag
from models.config import RNNConfig, RunConfig, TrainConfig, load_run_config
from models.guided import alignment_targets, guided_loss
from models.train import TrainError, prepare_data, train
from service.engine.tokenizer import EOS_ID, Tokenizer
from tests.conftest import PROJECT_ROOT
from tests.support.synthetic import synthetic_pairs

TINY_RNN = PROJECT_ROOT / "models" / "configs" / "tiny-rnn.toml"


def test_grow_diag_keeps_the_intersection_and_grows_next_to_it() -> None:
    forward = {(0, 0), (1, 1), (5, 5)}
    backward = {(0, 0), (1, 1), (1, 2), (8, 1)}
    links = grow_diag(forward, backward)
    assert {(0, 0), (1, 1)} <= links  # the intersection
    assert (1, 2) in links  # a union link next to (1, 1), its target 2 still unaligned
    assert (5, 5) not in links and (8, 1) not in links  # union links next to nothing accepted


def test_align_links_tokens_and_eos_and_caches(
    en_tokenizer: Tokenizer, zh_tokenizer: Tokenizer, tmp_path: Path
) -> None:
    pairs = synthetic_pairs()
    src = [[*ids, EOS_ID] for ids in en_tokenizer.encode_ids([en for en, _ in pairs])]
    tgt = [[*ids, EOS_ID] for ids in zh_tokenizer.encode_ids([zh for _, zh in pairs])]
    links = align(src, tgt, tmp_path)
    assert len(links) == len(pairs)
    for s, t, pair in zip(src, tgt, links, strict=True):
        assert (len(s) - 1, len(t) - 1) in pair  # EOS to EOS
        assert all(0 <= a < len(s) and 0 <= b < len(t) for a, b in pair)
    # Words linked, not only EOS. eflomal samples with no seed, and on 450 toy pairs the count
    # swings: 391-450 pairs (mean 445) over 300 runs here, 387 once in CI, so a bound far below that.
    assert sum(len(pair) > 1 for pair in links) > 0.5 * len(pairs)
    [cache] = tmp_path.glob("alignments-*.json")
    assert json.loads(cache.read_text()) == [[list(link) for link in pair] for pair in links]
    assert align(src, tgt, tmp_path) == links  # from the cache


def test_alignment_targets_are_row_distributions_and_skip_unlinked_rows() -> None:
    targets = alignment_targets([[(0, 0), (2, 0), (1, 2)]], src_len=3, tgt_len=4)  # (1, 4, 3)
    assert targets[0, 0].tolist() == [0.5, 0.0, 0.5]
    assert targets[0, 1].sum() == 0 and targets[0, 3].sum() == 0
    assert targets[0, 2].tolist() == [0.0, 1.0, 0.0]


def test_guided_loss_pulls_the_head_onto_the_links() -> None:
    logits = torch.zeros(1, 2, 2, 3, 4, requires_grad=True)  # (B, L, H, T, S)
    targets = alignment_targets([[(3, 0), (1, 1)]], src_len=4, tgt_len=3)
    optimizer = torch.optim.SGD([logits], lr=5.0)
    for _ in range(50):
        loss = guided_loss(logits.softmax(-1), targets, layer=-1, head=1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    weights = logits.softmax(-1).detach()
    assert weights[0, 1, 1, 0].argmax() == 3 and weights[0, 1, 1, 1].argmax() == 1
    assert torch.equal(weights[0, 0], torch.full((2, 3, 4), 0.25))  # other heads untouched
    assert float(weights[0, 1, 1, 2].max()) == pytest.approx(0.25)  # an unlinked row is left free


def test_a_guided_run_trains_and_a_bad_head_is_refused(synthetic_corpus: Path, tmp_path: Path) -> None:
    config = load_run_config(TINY_RNN)
    guided = dataclasses.replace(config, train=dataclasses.replace(config.train, guided_alignment=0.5))
    progress = train(guided, tmp_path / "run", corpus=synthetic_corpus, train_overrides={"epochs": 1}, threads=1)
    assert progress["step"] > 0
    assert list((tmp_path / "run").glob("alignments-*.json"))
    wrong = dataclasses.replace(guided, train=dataclasses.replace(guided.train, guided_head=1))
    with pytest.raises(TrainError, match="guided_head 1"):
        train(wrong, tmp_path / "other", corpus=synthetic_corpus, threads=1)


def test_real_text_adds_only_its_training_split(
    synthetic_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from models.data import read_corpus, split_real_text
    from tests.support.synthetic import write_corpus

    real = write_corpus(tmp_path / "real.tsv", [(f"News item number {i}.", f"第{i}条新闻。") for i in range(400)])
    monkeypatch.setenv("ATTENTION_MT_REAL_TEXT", str(real))
    base = RunConfig(model=RNNConfig(), train=TrainConfig())
    with_real = dataclasses.replace(base, data=dataclasses.replace(base.data, real_text=True))
    plain = prepare_data(base, synthetic_corpus, None)
    mixed = prepare_data(with_real, synthetic_corpus, None)
    splits = split_real_text(read_corpus(real))
    assert len(mixed.src_ids) == len(plain.src_ids) + len(splits["train"])
    assert splits["dev"] and splits["test"]
    assert mixed.corpus_sha256 != plain.corpus_sha256  # a resumed run notices the added data
    zh = {mixed.tgt_tokenizer.decode_text(ids[:-1]) for ids in mixed.tgt_ids}
    assert not {p.zh for p in splits["test"] + splits["dev"]} & zh


def test_a_joint_vocabulary_with_shared_embeddings_trains_guided_and_exports(
    synthetic_corpus: Path, tmp_path: Path
) -> None:
    """The issue-18 recipe end to end at toy size: one vocabulary, tied embeddings, a guided head."""
    from export.pipeline import ExportOptions, export_run
    from service.engine.bundle import load_bundle
    from service.engine.translator import Translator

    base = load_run_config(PROJECT_ROOT / "models" / "configs" / "tiny.toml")
    config = dataclasses.replace(
        base,
        model=dataclasses.replace(base.model, share_embeddings=True),
        data=dataclasses.replace(base.data, joint_vocab=True, src_vocab_size=120, tgt_vocab_size=120),
        train=dataclasses.replace(base.train, guided_alignment=0.5, guided_layer=-1, guided_head=1),
    )
    train(config, tmp_path / "run", corpus=synthetic_corpus, train_overrides={"epochs": 1}, threads=1)
    src = (tmp_path / "run" / "tokenizers" / "en.model").read_bytes()
    assert src == (tmp_path / "run" / "tokenizers" / "zh.model").read_bytes()
    export_run(tmp_path / "run", tmp_path / "bundle", ExportOptions(quality_split=None, alignment=False))
    translator = Translator(load_bundle(tmp_path / "bundle"))
    assert len(translator.translate_texts(["Tom chases Jerry."], translator.options(1, 1, None, None, None, None))) == 1
