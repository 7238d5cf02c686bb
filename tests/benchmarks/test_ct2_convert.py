"""The CTranslate2 conversion decodes exactly like our own search: same greedy tokens, same scores."""

from __future__ import annotations

import json
from pathlib import Path

import ctranslate2  # type: ignore[import-untyped]
import pytest

from benchmarks.ct2_convert import (
    UnsupportedCheckpointError,
    convert_checkpoint,
    ids_to_tokens,
    main,
    read_vocabularies,
    tokens_to_ids,
)
from models.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from models.config import RNNConfig, RunConfig
from models.decoding import translate_ids
from models.registry import build_model
from service.engine.search import max_output_length, truncated_source_ids
from service.engine.tokenizer import EOS_ID, Tokenizer
from tests.support.synthetic import synthetic_pairs

SOURCES = [en for en, _ in synthetic_pairs()[::9]]  # 50 sentences across the grammar


@pytest.fixture(scope="module")
def converted(trained_tiny_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return convert_checkpoint(trained_tiny_run / "best.pt", tmp_path_factory.mktemp("ct2") / "fp32")


def _translator(model_dir: Path, compute_type: str = "float32") -> ctranslate2.Translator:
    return ctranslate2.Translator(str(model_dir), device="cpu", compute_type=compute_type, intra_threads=1)


def test_config_names_our_special_tokens(converted: Path) -> None:
    config = json.loads((converted / "config.json").read_text(encoding="utf-8"))
    assert (config["bos_token"], config["eos_token"], config["unk_token"]) == ("<s>", "</s>", "<unk>")
    assert config["decoder_start_token"] == "<s>"
    assert not config["add_source_bos"] and not config["add_source_eos"]


def test_greedy_tokens_and_scores_match_our_search(trained_tiny_run: Path, converted: Path) -> None:
    ckpt = load_checkpoint(trained_tiny_run / "best.pt")
    max_src, max_tgt = ckpt.config.data.max_src_tokens, ckpt.config.data.max_tgt_tokens
    src_ids = truncated_source_ids(ckpt.src_tokenizer.encode_ids(SOURCES), max_src, EOS_ID)
    ours = [nbest[0] for nbest in translate_ids(ckpt.model, src_ids, max_tgt, beam_size=1, alpha=0.0)]

    source_vocab, target_vocab = read_vocabularies(converted)
    index = {token: i for i, token in enumerate(target_vocab)}
    caps = [max_output_length(len(s), max_tgt) for s in src_ids]  # ours caps each sentence, CT2 the batch
    results = _translator(converted).translate_batch(
        [ids_to_tokens(s, source_vocab) for s in src_ids],
        beam_size=1,
        length_penalty=0.0,
        min_decoding_length=0,  # CT2's default 1 masks EOS before the softmax at step 0: other scores
        max_decoding_length=max(caps),
        return_scores=True,
    )
    theirs = [tokens_to_ids(r.hypotheses[0], index)[:cap] for r, cap in zip(results, caps, strict=True)]
    assert theirs == [[t for t in h.tokens if t != EOS_ID] for h in ours]
    assert all(h.finished for h in ours)  # so the scores below cover the same tokens, EOS included
    assert [r.scores[0] for r in results] == pytest.approx([h.log_prob for h in ours], abs=1e-3)


def test_ids_round_trip_through_tokens(converted: Path) -> None:
    source_vocab, target_vocab = read_vocabularies(converted)
    ids = list(range(len(target_vocab)))
    assert tokens_to_ids(ids_to_tokens(ids, target_vocab), {t: i for i, t in enumerate(target_vocab)}) == ids
    assert ids_to_tokens([EOS_ID], source_vocab) == ["</s>"]


def test_cli_writes_an_int8_model_that_translates(trained_tiny_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "int8"
    main([str(trained_tiny_run / "best.pt"), "--out", str(out), "--quantization", "int8"])
    source_vocab, _ = read_vocabularies(out)
    ckpt = load_checkpoint(trained_tiny_run / "best.pt")
    src = [*ckpt.src_tokenizer.encode_ids(SOURCES[:1])[0], EOS_ID]
    [result] = _translator(out, "int8").translate_batch([ids_to_tokens(src, source_vocab)], beam_size=1)
    assert result.hypotheses[0]


def test_an_rnn_checkpoint_is_refused(en_tokenizer: Tokenizer, zh_tokenizer: Tokenizer, tmp_path: Path) -> None:
    config = RunConfig(
        model=RNNConfig(
            src_vocab=en_tokenizer.vocab_size,
            tgt_vocab=zh_tokenizer.vocab_size,
            emb_dim=8,
            enc_hidden=8,
            dec_hidden=16,
            attn_dim=8,
        )
    )
    path = tmp_path / "rnn.pt"
    save_checkpoint(path, Checkpoint(config, build_model(config.model), en_tokenizer, zh_tokenizer))
    with pytest.raises(UnsupportedCheckpointError, match="rnn"):
        convert_checkpoint(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()
