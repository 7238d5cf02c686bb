"""Word merging, top-k and the signals, on hand-made matrices."""

from __future__ import annotations

import numpy as np
import pytest

from service.engine.attention_view import Token, merge_matrix, merge_tokens, select_heads, top_k, word_groups
from service.engine.signals import signals

SOURCE_TEXT = "Tom chases Jerry."
SOURCE = [
    Token("Tom", 0, 3),
    Token("chase", 4, 9),
    Token("s", 9, 10),
    Token("Jerry", 11, 16),
    Token(".", 16, 17),
    Token("</s>", 17, 17, special=True),
]
PIECES = ["▁Tom", "▁chase", "s", "▁Jerry", ".", "</s>"]


def test_english_words_split_at_spaces_punctuation_and_specials() -> None:
    assert word_groups(SOURCE, PIECES) == [[0], [1, 2], [3], [4], [5]]


def test_chinese_pieces_are_words() -> None:
    tokens = [Token("汤姆", 0, 2), Token("追", 2, 3), Token("。", 3, 4)]
    assert word_groups(tokens, ["▁汤姆", "追", "。"]) == [[0], [1], [2]]


def test_words_follow_the_script_not_the_language_code() -> None:
    # German joins pieces within a word; Japanese kana and Thai, written without spaces, do not;
    # a target-language token is a word of its own
    german = [Token(">>deu<<", 0, 0, special=True), Token("Tom", 0, 3), Token("ja", 4, 6), Token("gt", 6, 8)]
    assert word_groups(german, [">>deu<<", "▁Tom", "▁ja", "gt"]) == [[0], [1], [2, 3]]
    japanese = [Token("トム", 0, 2), Token("は", 2, 3), Token("走る", 3, 5)]
    assert word_groups(japanese, ["▁トム", "は", "走る"]) == [[0], [1], [2]]
    thai = [Token("ทอม", 0, 3), Token("วิ่ง", 3, 7)]
    assert word_groups(thai, ["▁ทอม", "วิ่ง"]) == [[0], [1]]


def test_merge_sums_source_pieces_means_target_pieces_and_renormalises() -> None:
    # 2 target pieces x 6 source pieces; target pieces 0 and 1 form one word
    m = np.array([[0.1, 0.2, 0.3, 0.2, 0.1, 0.1], [0.3, 0.1, 0.1, 0.3, 0.1, 0.1]])
    merged = merge_matrix(m, word_groups(SOURCE, PIECES), [[0, 1]])
    # columns: Tom, chases (0.2+0.3 | 0.1+0.1), Jerry, ., </s>; rows averaged
    np.testing.assert_allclose(merged, [[0.2, 0.35, 0.25, 0.1, 0.1]])
    words = merge_tokens(SOURCE, word_groups(SOURCE, PIECES), SOURCE_TEXT)
    assert [(w.text, w.start, w.end) for w in words][:2] == [("Tom", 0, 3), ("chases", 4, 10)]
    assert words[-1].special


def test_merged_logprob_is_the_sum() -> None:
    tokens = [Token("a", 0, 1, logprob=-1.0), Token("b", 1, 2, logprob=-0.5)]
    [word] = merge_tokens(tokens, [[0, 1]], "ab")
    assert word.logprob == pytest.approx(-1.5) and word.text == "ab"


def test_select_heads() -> None:
    attention = np.zeros((1, 2, 2, 3))  # (T, L, N, S)
    attention[0, 1, 0] = [1, 0, 0]
    attention[0, 1, 1] = [0, 0, 1]
    np.testing.assert_allclose(select_heads(attention, -1, "mean"), [[0.5, 0, 0.5]])
    np.testing.assert_allclose(select_heads(attention, 1, 1), [[0, 0, 1]])


def test_top_k() -> None:
    assert top_k(np.array([[0.3, 0.2, 0.5]]), 2) == [[{"index": 2, "weight": 0.5}, {"index": 0, "weight": 0.3}]]


def test_signals_of_the_tutorial_row() -> None:
    # translating 杰瑞 attends (Tom 0.3, chase 0.2, Jerry 0.5); a second row puts 0.9 on </s>
    source = [Token("Tom", 0, 3), Token("chase", 4, 9), Token("Jerry", 10, 15), Token("</s>", 15, 15, special=True)]
    m = np.array([[0.3, 0.2, 0.5, 0.0], [0.05, 0.0, 0.05, 0.9]])
    s = signals(m, source, threshold=0.25)
    np.testing.assert_allclose(s.coverage, [0.35, 0.2, 0.55, 0.9])
    expected_entropy = -(0.3 * np.log(0.3) + 0.2 * np.log(0.2) + 0.5 * np.log(0.5))
    assert s.entropy[0] == pytest.approx(expected_entropy, abs=1e-6)
    assert s.unattended_source == [1]  # "chase" got 0.2 < 0.25; </s> is never flagged
    assert s.eos_mass == pytest.approx(0.45)
