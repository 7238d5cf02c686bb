"""Cutting texts into the pieces a model translates, and joining the translations back."""

from __future__ import annotations

from service.engine.joining import join, separator
from service.engine.segmentation import Piece, Segmenter, sentences
from service.engine.tokenizer import Encoding


class CharTokens:
    """A stand-in tokenizer: one token per non-space character, offsets kept."""

    def encode(self, text: str) -> Encoding:
        spans = [(i, i + 1) for i, ch in enumerate(text) if not ch.isspace()]
        return Encoding(text, [1] * len(spans), [text[s:e] for s, e in spans], spans, [False] * len(spans))

    def encode_ids(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t).ids for t in texts]


def cut(text: str, lang: str = "en", limit: int = 1000) -> list[tuple[str, str]]:
    return [(text[p.start : p.end], p.join) for p in Segmenter(CharTokens(), lang, limit)(text)]  # type: ignore[arg-type]


def test_sentences_lines_and_abbreviations() -> None:
    text = "  Dr. Smith went to Washington D.C. on Friday. He left!\n\nNew paragraph here.  "
    assert [(text[p.start : p.end], p.join) for p in sentences(text, "en")] == [
        ("Dr. Smith went to Washington D.C. on Friday.", "start"),
        ("He left!", "sentence"),
        ("New paragraph here.", "line"),
    ]
    assert cut("第一句。第二句！\n第三句", "zh") == [
        ("第一句。", "start"),
        ("第二句！", "sentence"),
        ("第三句", "line"),
    ]
    assert cut("第一句。第二句", "cmn_Hans") == [("第一句。", "start"), ("第二句", "sentence")]  # a Marian code


def test_a_long_sentence_is_cut_at_clauses_packed_to_the_limit() -> None:
    text = "one two, three four; five six: seven eight, nine."
    pieces = cut(text, limit=12)  # 12 tokens with the end token: 11 characters
    assert [p for p, _ in pieces] == ["one two,", "three four;", "five six:", "seven eight,", "nine."]
    assert [j for _, j in pieces] == ["start", "clause", "clause", "clause", "clause"]
    packed = cut(text, limit=20)
    assert all(len(p.replace(" ", "")) + 1 <= 20 for p, _ in packed) and len(packed) < len(pieces)
    assert "".join(p for p, _ in packed).replace(" ", "") == text.replace(" ", "")
    chinese = cut("北京、上海和广州的官员说，学校将继续关闭，而医院日夜工作。", "zh", limit=12)
    assert all(len(p) + 1 <= 12 for p, _ in chinese) and {j for _, j in chinese[1:]} == {"clause"}


def test_no_clause_to_cut_at_cuts_at_the_limit() -> None:
    text = "a" * 50
    pieces = cut(text, limit=10)
    assert "".join(p for p, _ in pieces) == text
    assert all(len(p) + 1 <= 10 for p, _ in pieces) and {j for _, j in pieces[1:]} == {"limit"}


def test_pieces_come_with_their_encodings_as_if_tokenized_again() -> None:
    text = "Short one. one two, three four; five six: seven eight, nine.\n" + "a" * 30
    segmenter = Segmenter(CharTokens(), "en", 12)  # type: ignore[arg-type]
    encoded = segmenter.encoded(text)
    assert [p for p, _ in encoded] == segmenter(text)
    assert [e for _, e in encoded] == [CharTokens().encode(text[p.start : p.end]) for p in segmenter(text)]
    assert {p.join for p, _ in encoded} == {"start", "sentence", "clause", "line", "limit"}  # every path


def test_joins_keep_line_breaks_and_space_only_between_spaced_scripts() -> None:
    assert separator("  ", "Hello.", "World.") == " "
    assert separator("\n\n", "Hello.", "World.") == "\n\n"
    assert separator(" ", "汤姆追杰瑞。", "玛丽笑了。") == ""  # Chinese sentences follow each other directly
    assert separator("", "Tom chases Jerry.", "Mary laughs.") == " "  # from Chinese: the source had no space
    text = "A. B.\nC."
    pieces = [Piece(0, 2, "start"), Piece(3, 5, "sentence"), Piece(6, 8, "line")]
    joined, spans = join(text, pieces, ["甲。", "乙。", "丙。"])
    assert joined == "甲。乙。\n丙。" and [joined[s:e] for s, e in spans] == ["甲。", "乙。", "丙。"]
