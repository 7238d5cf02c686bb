"""Writing systems of characters: what word grouping, joining and language detection need.

Language-neutral on purpose: a bundle may translate any pair, so the engine decides by script
(Han, kana, Thai, Latin, Cyrillic...) what a language code alone cannot tell it.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

# Scripts written without spaces between words: Thai, Lao, Tibetan, Myanmar, Khmer, kana, CJK.
UNSPACED: tuple[tuple[int, int], ...] = (
    *((0x0E00, 0x0EFF), (0x0F00, 0x0FFF), (0x1000, 0x109F), (0x1780, 0x17FF), (0x3040, 0x30FF)),
    *((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x2FA1F)),
)
# CJK symbols and punctuation, and full-width forms: 。，、「」（）！？ ...
CJK_PUNCTUATION = ((0x3000, 0x303F), (0xFF00, 0xFFEF))


def _within(ch: str, ranges: tuple[tuple[int, int], ...]) -> bool:
    code = ord(ch)
    return any(lo <= code <= hi for lo, hi in ranges)


def unspaced(text: str) -> bool:
    """Whether text has a character of a script that does not put spaces between words."""
    return any(_within(ch, UNSPACED) for ch in text)


def joins_without_space(ch: str) -> bool:
    """Whether a character next to a boundary means no space there (CJK text and its punctuation)."""
    return _within(ch, UNSPACED) or _within(ch, CJK_PUNCTUATION)


@lru_cache(maxsize=8192)  # asked of every character of every request; texts reuse few characters
def script_of(ch: str) -> str | None:
    """A letter's script by its Unicode name ("LATIN", "CJK", "CYRILLIC", "HIRAGANA"...); None for the rest."""
    if not ch.isalpha():
        return None
    if _within(ch, UNSPACED[5:]):
        return "CJK"
    name = unicodedata.name(ch, "")
    return name.split(" ")[0] if name else None
