"""Text normalisation and validation shared by training and serving.

Both sides call `normalize` so that a sentence is tokenized identically at training time and at
request time; offsets returned by the tokenizer index into the normalised text.
"""

from __future__ import annotations

import unicodedata

from service.engine.errors import FIELD, TEXT, InvalidText, Subject

# Whitespace controls that are harmless in a sentence: they are folded to spaces by the tokenizer.
_ALLOWED_CONTROLS = frozenset("\t\n\r")


def normalize(text: str) -> str:
    """NFC-normalise and strip surrounding whitespace."""
    return unicodedata.normalize("NFC", text).strip()


def check_text(text: str, subject: Subject = TEXT) -> None:
    """Raise InvalidText naming the first character that a translation cannot take."""
    for i, ch in enumerate(text):
        if 0xD800 <= ord(ch) <= 0xDFFF:
            raise InvalidText(f"{FIELD} has a lone surrogate U+{ord(ch):04X} at index {i}", field=subject)
        if ch not in _ALLOWED_CONTROLS and unicodedata.category(ch) == "Cc":
            raise InvalidText(f"{FIELD} has control character U+{ord(ch):04X} at index {i}", field=subject)
    if not text.strip():
        raise InvalidText(f"{FIELD} is empty or whitespace only", field=subject)
