"""The torch-free Marian tokenizer gives transformers' MarianTokenizer's ids and texts, with offsets."""

from __future__ import annotations

import json
import random
import warnings
from pathlib import Path

import pytest

from service.engine.errors import TokenizerError
from service.engine.vocab_tokenizer import VocabTokenizer, read_vocab

transformers = pytest.importorskip("transformers")

TEXTS = [
    "Tom chases Jerry.",
    "  Mary   helps\tBob today. ",
    "Tom’s café: 3 × 4 = 12?",
    "Tom 😀 sees Zoë and Ørjan",
    "汤姆追杰瑞。",
    "Jerry",
]


def hf_tokenizer(directory: Path) -> object:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.MarianTokenizer.from_pretrained(directory)


def ours(directory: Path, side: str, prefix: str | None = None) -> VocabTokenizer:
    vocab = "target_vocab.json" if side == "target" and (directory / "target_vocab.json").exists() else "vocab.json"
    specials = {0, read_vocab(directory / vocab)["<pad>"]}  # </s> and <pad>
    return VocabTokenizer.from_files(directory / f"{side}.spm", directory / vocab, specials, prefix)


@pytest.mark.parametrize(("checkpoint", "prefix"), [("en-de", ">>deu<<"), ("en-zh", None)])
def test_source_ids_are_transformers_ids(
    marian_checkpoints: dict[str, Path], checkpoint: str, prefix: str | None
) -> None:
    directory = marian_checkpoints[checkpoint]
    hf, tok = hf_tokenizer(directory), ours(directory, "source", prefix)
    for text in TEXTS:
        expected = hf(f"{prefix} {text.strip()}" if prefix else text.strip())["input_ids"]  # type: ignore[operator]
        enc = tok.encode(text)
        assert [*enc.ids, 0] == expected, text  # transformers adds </s> (0)
        assert tok.encode_ids([text]) == [enc.ids]
        for i, (piece, (s, e)) in enumerate(zip(enc.pieces, enc.offsets, strict=True)):
            if enc.is_special(i):
                assert (s, e) == (0, 0) and piece == prefix
            elif piece == "\u2581":  # a lone word boundary stands for a space: an empty span
                assert s == e
            else:  # a span covers what the piece stands for, no leading space
                assert enc.text[s:e] and not enc.text[s:e][0].isspace()


@pytest.mark.parametrize("checkpoint", ["en-de", "en-zh"])
def test_decoding_gives_transformers_text_and_spans_for_every_id(
    marian_checkpoints: dict[str, Path], checkpoint: str
) -> None:
    directory = marian_checkpoints[checkpoint]
    hf, tok = hf_tokenizer(directory), ours(directory, "target")
    rng = random.Random(0)
    for _ in range(200):  # any ids at all, <unk>, </s>, <pad> and language tokens among them
        ids = [rng.randrange(tok.vocab_size) for _ in range(rng.randint(0, 12))]
        decoded = tok.decode(ids)
        assert decoded.text == hf.decode(ids, skip_special_tokens=True), ids  # type: ignore[attr-defined]
        assert len(decoded.pieces) == len(decoded.offsets) == len(ids)  # tokens stay aligned with log-probs
        for i, (s, e) in enumerate(decoded.offsets):
            assert 0 <= s <= e <= len(decoded.text)
            assert not decoded.is_special(i) or s == e


def test_bad_vocabularies_are_refused(tmp_path: Path, marian_checkpoints: dict[str, Path]) -> None:
    spm = marian_checkpoints["en-de"] / "source.spm"
    cases = {"gaps": {"<unk>": 0, "a": 2}, "not ids": {"<unk>": "0"}, "no unk": {"a": 0}}
    for name, vocab in cases.items():
        path = tmp_path / f"{name.replace(' ', '-')}.json"
        path.write_text(json.dumps(vocab), encoding="utf-8")
        with pytest.raises(TokenizerError):
            VocabTokenizer.from_files(spm, path, {0})
    with pytest.raises(TokenizerError, match="'>>fra<<' is not in the vocabulary"):
        ours(marian_checkpoints["en-de"], "source", ">>fra<<")
