"""Joining the translations of a text's pieces back into one text, with the text's own breaks."""

from __future__ import annotations

from service.engine.scripts import joins_without_space
from service.engine.segmentation import Piece


def separator(gap: str, before: str, after: str) -> str:
    """Between two translated pieces: the source's line breaks; else a space, unless the text on
    either side is written without spaces (Chinese sentences follow each other directly)."""
    if newlines := gap.count("\n"):
        return "\n" * newlines
    if not before or not after or joins_without_space(before[-1]) or joins_without_space(after[0]):
        return ""
    return " "


def join(text: str, pieces: list[Piece], outputs: list[str]) -> tuple[str, list[tuple[int, int]]]:
    """The joined translation and each piece's character span in it."""
    joined, spans = "", []
    for i, (piece, output) in enumerate(zip(pieces, outputs, strict=True)):
        if i:
            joined += separator(text[pieces[i - 1].end : piece.start], joined, output)
        spans.append((len(joined), len(joined) + len(output)))
        joined += output
    return joined, spans
