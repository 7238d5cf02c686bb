from __future__ import annotations

import io
import unicodedata

import pytest
import sentencepiece as spm
from hypothesis import given, settings
from hypothesis import strategies as st

from service.engine.errors import TokenizerError
from service.engine.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, WORD_BOUNDARY, Tokenizer
from tests.support.synthetic import synthetic_pairs


def _check_spans(enc_text: str, pieces: list[str], ids: list[int], offsets: list[tuple[int, int]]) -> None:
    previous_end = 0
    for piece, token_id, (start, end) in zip(pieces, ids, offsets, strict=True):
        assert previous_end <= start <= end <= len(enc_text)
        previous_end = end
        if token_id != UNK_ID and piece != WORD_BOUNDARY:
            assert enc_text[start:end] == piece.lstrip(WORD_BOUNDARY)


def test_special_ids_are_the_projects(en_tokenizer: Tokenizer) -> None:
    assert [en_tokenizer.piece(i) for i in (PAD_ID, UNK_ID, BOS_ID, EOS_ID)] == [
        "<pad>",
        "<unk>",
        "<s>",
        "</s>",
    ]


@pytest.mark.parametrize("which", ["en", "zh"])
def test_round_trip_on_corpus_sentences(which: str, en_tokenizer: Tokenizer, zh_tokenizer: Tokenizer) -> None:
    tok = en_tokenizer if which == "en" else zh_tokenizer
    for en, zh in synthetic_pairs()[:100]:
        text = en if which == "en" else zh
        enc = tok.encode(text)
        assert tok.decode_text(enc.ids) == text
        _check_spans(enc.text, enc.pieces, enc.ids, enc.offsets)


def test_offsets_are_characters_not_bytes(zh_tokenizer: Tokenizer) -> None:
    enc = zh_tokenizer.encode("汤姆追杰瑞。")
    assert "".join(enc.text[s:e] for s, e in enc.offsets) == "汤姆追杰瑞。"
    assert enc.offsets[-1][1] == len("汤姆追杰瑞。")


def test_offsets_skip_the_space_before_a_word(en_tokenizer: Tokenizer) -> None:
    enc = en_tokenizer.encode("Tom  chases Jerry.")
    assert enc.text == "Tom  chases Jerry."  # normalisation keeps inner spaces; offsets index this text
    words = {enc.text[s:e] for s, e in enc.offsets}
    assert "Tom" in words and "Jerry" in words
    assert all(not enc.text[s:e].startswith(" ") for s, e in enc.offsets)


def test_unknown_characters_keep_their_span(en_tokenizer: Tokenizer) -> None:
    enc = en_tokenizer.encode("Tom likes 猫.")
    unk = [enc.text[s:e] for (s, e), i in zip(enc.offsets, enc.ids, strict=True) if i == UNK_ID]
    assert unk and "猫" in "".join(unk)


def test_text_is_nfc_normalised(en_tokenizer: Tokenizer) -> None:
    decomposed = unicodedata.normalize("NFD", "Tom sees Zoé.")
    assert decomposed != "Tom sees Zoé."
    enc = en_tokenizer.encode(decomposed)
    assert enc.text == "Tom sees Zoé."
    assert enc.ids == en_tokenizer.encode("Tom sees Zoé.").ids
    assert en_tokenizer.encode_ids([decomposed]) == [enc.ids]


def test_decode_gives_offsets_into_the_output(zh_tokenizer: Tokenizer) -> None:
    ids = zh_tokenizer.encode("玛丽今天帮助约翰。").ids
    dec = zh_tokenizer.decode([BOS_ID, *ids, EOS_ID])
    assert dec.text == "玛丽今天帮助约翰。"
    assert dec.ids == ids
    _check_spans(dec.text, dec.pieces, dec.ids, dec.offsets)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="TomJerychasMliBb .!?汤姆杰瑞追。 é\u0301", max_size=40))
def test_offsets_property(text: str) -> None:
    # A fixture cannot be used with @given; a module-level tokenizer is built once.
    tok = _module_tokenizer()
    enc = tok.encode(text)
    _check_spans(enc.text, enc.pieces, enc.ids, enc.offsets)
    covered = {i for s, e in enc.offsets for i in range(s, e)}
    assert all(i in covered for i, ch in enumerate(enc.text) if not ch.isspace())


_TOK: list[Tokenizer] = []


def _module_tokenizer() -> Tokenizer:
    if not _TOK:
        from models.vocab import train_tokenizer

        _TOK.append(train_tokenizer([f"{en} {zh}" for en, zh in synthetic_pairs()], "zh", 80))
    return _TOK[0]


def test_a_model_with_other_special_ids_is_refused() -> None:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([en for en, _ in synthetic_pairs()]),
        model_writer=model,
        vocab_size=40,
        hard_vocab_limit=False,
        minloglevel=2,
    )  # SentencePiece's defaults: unk 0, bos 1, eos 2, no pad
    with pytest.raises(TokenizerError, match="special ids"):
        Tokenizer(model.getvalue())


def test_garbage_is_not_a_model() -> None:
    with pytest.raises(TokenizerError, match="not a SentencePiece model"):
        Tokenizer(b"definitely not a model")
