from __future__ import annotations

import pytest

from service.engine.errors import InvalidText, Subject
from service.engine.text import check_text, normalize


def test_normalize_is_nfc_and_strips() -> None:
    assert normalize("  Zoe\u0301 \n") == "Zoé"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a\x00b", "U\\+0000 at index 1"),
        ("a\x07", "U\\+0007"),
        ("ok \ud800", "lone surrogate U\\+D800 at index 3"),
        ("   ", "empty"),
        ("", "empty"),
    ],
)
def test_check_text_rejects(text: str, message: str) -> None:
    with pytest.raises(InvalidText, match=message) as refused:
        check_text(text, Subject("texts", 0))
    assert refused.value.subject == Subject("texts", 0)
    assert refused.value.message.startswith("texts[0] ")  # the engine's own name for it
    assert refused.value.worded("line 3").startswith("line 3 ")  # an edge's name for it


def test_check_text_accepts_tabs_newlines_and_cjk() -> None:
    check_text("Tom\tchases\nJerry. 汤姆追杰瑞。")
