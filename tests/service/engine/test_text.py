from __future__ import annotations

import pytest

from service.engine.errors import InvalidText
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
    with pytest.raises(InvalidText, match=message):
        check_text(text, field="q[0]")


def test_check_text_accepts_tabs_newlines_and_cjk() -> None:
    check_text("Tom\tchases\nJerry. 汤姆追杰瑞。")
