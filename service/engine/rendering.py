"""Hypotheses -> what a client sees: tokens with character offsets, attention at a view, and one
text, token list and attention matrix for a text the model translated in several pieces.

A text cut into pieces (sentences, clauses) is shown as one translation: tokens are numbered
through the whole text, offsets index the whole source and the joined translation, and the
attention matrix is block-diagonal: a piece's target tokens attended only to its own source
tokens, so every cell outside a piece's block is 0 and every row still sums to 1.

Legend: T target tokens, S source tokens, L layers, N heads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from service.engine.attention_view import Matrix, Token, merge_matrix, merge_tokens, select_heads, word_groups
from service.engine.requests import AttentionOptions
from service.engine.results import Rendered, SegmentSpan
from service.engine.search import Hypothesis
from service.engine.segmentation import Piece
from service.engine.signals import signals
from service.engine.tokenizer import Encoding
from service.engine.translator import Translator


@dataclass(frozen=True)
class PieceView:
    """One piece's hypothesis at a granularity: its tokens (offsets within the piece) and attention."""

    text: str
    score: float
    finished: bool
    source_tokens: list[Token]
    target_tokens: list[Token]
    attention: npt.NDArray[np.float64]  # (..., T, S): (T, S) at a view, or (L, N, T, S) for every head


def source_tokens(source: Encoding) -> tuple[list[Token], list[str]]:
    """The pieces the encoder read (a target-language token flagged special, with an empty span),
    and its end-of-sentence token (flagged special)."""
    end = len(source.text)
    tokens = [
        Token(p if source.is_special(i) or e <= s else source.text[s:e], s, e, special=source.is_special(i))
        for i, (p, (s, e)) in enumerate(zip(source.pieces, source.offsets, strict=True))
    ]
    return [*tokens, Token("</s>", end, end, special=True)], [*source.pieces, "</s>"]


def target_tokens(translator: Translator, hyp: Hypothesis) -> tuple[list[Token], list[str], str]:
    """Generated pieces with their offsets in the output text and log-probs; EOS (and any other
    token that leaves no text, e.g. <unk> in a converted model) flagged special."""
    body = hyp.tokens[:-1] if hyp.finished else hyp.tokens
    decoded = translator.tgt_tokenizer.decode(body)
    text = decoded.text
    tokens = []
    for i, (p, (s, e), lp) in enumerate(
        zip(decoded.pieces, decoded.offsets, hyp.token_log_probs[: len(body)], strict=True)
    ):
        surface = p if decoded.is_special(i) else text[s:e] if e > s else p.replace("\u2581", " ")
        tokens.append(Token(surface, s, e, special=decoded.is_special(i), logprob=float(lp)))
    pieces = list(decoded.pieces)
    if hyp.finished:
        tokens.append(Token("</s>", len(text), len(text), special=True, logprob=float(hyp.token_log_probs[-1])))
        pieces.append("</s>")
    return tokens, pieces, text


def view_piece(
    translator: Translator, source: Encoding, hyp: Hypothesis, view: AttentionOptions, all_heads: bool = False
) -> PieceView:
    """A piece's hypothesis at the view's granularity: its (T, S) attention at the view's layer and
    heads, or (all_heads) its (L, N, T, S) attention over every layer and head."""
    src_tokens, src_pieces = source_tokens(source)
    tgt_tokens, tgt_pieces, text = target_tokens(translator, hyp)
    raw = hyp.attention[:, :, :, : len(src_tokens)]  # (T, L, N, S)
    attention = raw.transpose(1, 2, 0, 3).astype(np.float64) if all_heads else _at_view(raw, view)
    if view.granularity == "word":
        src_groups, tgt_groups = word_groups(src_tokens, src_pieces), word_groups(tgt_tokens, tgt_pieces)
        attention = _merge(attention, src_groups, tgt_groups)
        src_tokens = merge_tokens(src_tokens, src_groups, source.text)
        tgt_tokens = merge_tokens(tgt_tokens, tgt_groups, text)
    return PieceView(text, hyp.score, hyp.finished, src_tokens, tgt_tokens, attention)


def _at_view(attention: npt.NDArray[np.float32], view: AttentionOptions) -> Matrix:
    assert view.layer is not None and view.heads is not None  # filled with the bundle's defaults first
    return select_heads(attention, view.layer, view.heads)  # (T, S)


def _merge(attention: npt.NDArray[np.float64], src: list[list[int]], tgt: list[list[int]]) -> npt.NDArray[np.float64]:
    """Word merging of (T, S), or of every (T, S) in (L, N, T, S)."""
    if attention.ndim == 2:
        return merge_matrix(attention, src, tgt)
    return np.array([[merge_matrix(m, src, tgt) for m in per_layer] for per_layer in attention])


def block_diagonal(blocks: list[npt.NDArray[np.float64]]) -> npt.NDArray[np.float64]:
    """(..., T_i, S_i) blocks -> (..., sum T_i, sum S_i), zero outside the blocks."""
    lead = blocks[0].shape[:-2]
    rows, cols = sum(b.shape[-2] for b in blocks), sum(b.shape[-1] for b in blocks)
    out = np.zeros((*lead, rows, cols))
    r = c = 0
    for b in blocks:
        out[..., r : r + b.shape[-2], c : c + b.shape[-1]] = b
        r, c = r + b.shape[-2], c + b.shape[-1]
    return out


def combine(
    views: list[PieceView], pieces: list[Piece], target_spans: list[tuple[int, int]], joined: str
) -> tuple[PieceView, list[SegmentSpan]]:
    """The pieces of one text as one translation, and where each piece went."""
    src_tokens: list[Token] = []
    tgt_tokens: list[Token] = []
    segments = []
    for view, piece, (t_start, t_end) in zip(views, pieces, target_spans, strict=True):
        s0, t0 = len(src_tokens), len(tgt_tokens)
        src_tokens += [_shifted(t, piece.start) for t in view.source_tokens]
        tgt_tokens += [_shifted(t, t_start) for t in view.target_tokens]
        span = SegmentSpan(
            (piece.start, piece.end), (t_start, t_end), (s0, len(src_tokens)), (t0, len(tgt_tokens)), piece.join
        )
        segments.append(span)
    attention = block_diagonal([v.attention for v in views])
    score = float(sum(v.score for v in views))  # log-probability-like scores add up over pieces
    whole = PieceView(joined, score, all(v.finished for v in views), src_tokens, tgt_tokens, attention)
    return whole, segments


def _shifted(token: Token, by: int) -> Token:
    return replace(token, start=token.start + by, end=token.end + by) if by else token  # tokens are frozen


def rendered(view: PieceView, threshold: float) -> Rendered:
    """The final (T, S) view with its signals."""
    matrix = view.attention
    return Rendered(
        view.text,
        view.score,
        view.finished,
        view.source_tokens,
        view.target_tokens,
        matrix,
        signals(matrix, view.source_tokens, threshold),
    )
