"""Which language a text is in, among the loaded models' sources, and when to warn."""

from __future__ import annotations

import pytest

from service.engine.errors import Subject
from service.engine.language import detect, mismatch


@pytest.mark.parametrize(
    ("text", "candidates", "expected"),
    [
        ("Tom chases Jerry.", ["en", "zh"], "en"),
        ("你好，世界。", ["en", "zh"], "zh"),
        ("汤姆在公园里追他的猫 Jerry。", ["en", "zh"], "zh"),  # mostly Chinese, a name in Latin letters
        ("Der Hund ist nicht im Haus und die Katze auch nicht.", ["en", "de"], "de"),
        ("The dog is not in the house and the cat is not either.", ["en", "de"], "en"),
        ("トムはジェリーを追いかける。", ["ja", "zh"], "ja"),
        ("Привет, мир", ["en", "ru"], "ru"),
        ("你好", ["cmn_Hans", "en"], "cmn_Hans"),  # a Marian-style code
    ],
)
def test_detect(text: str, candidates: list[str], expected: str) -> None:
    found = detect(text, candidates)
    assert found is not None and found.language == expected
    assert 0.0 < found.confidence <= 1.0


def test_a_script_alone_cannot_tell_latin_languages_apart() -> None:
    found = detect("Xyz qwv", ["en", "de"])  # no common word either way
    assert found is not None and found.confidence <= 0.5
    assert detect("12345 !!", ["en", "zh"]) is None  # no letters at all


def test_mismatch_warns_only_when_clear() -> None:
    text = Subject("texts", 1)
    notice = mismatch("你好", "en", text)
    assert notice is not None and notice.code == "language_mismatch" and notice.subject == text
    assert notice.message.startswith("texts[1] is mostly cjk") and notice.worded("q").startswith("q is mostly")
    assert mismatch("Tom chases Jerry.", "en", text) is None
    assert mismatch("汤姆在公园里追他的猫 Jerry。", "zh", text) is None
    assert mismatch("OK", "zh", text) is None  # too few letters to say
    assert mismatch("Bonjour tout le monde", "de", text) is None  # same script: no warning on a guess
