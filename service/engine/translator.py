"""Texts in, hypotheses out, over a bundle's ONNX graphs: tokenize, encode, search, detokenize.

The one path from text to translation that export's parity and quality checks and the service
share. A single text is a batch of one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from service.engine.attention_view import select_heads
from service.engine.bundle import Bundle
from service.engine.onnx_model import OnnxSeq2Seq, SessionConfig
from service.engine.search import (
    Coverage,
    Hypothesis,
    IntArray,
    Scoring,
    beam_search,
    best_in_length_order,
    coverage_penalty,
    greedy_search,
    max_output_length,
    truncated_source_ids,
)
from service.engine.tokenizer_loading import load_tokenizers


def pad_ids(sequences: list[list[int]], pad_id: int = 0) -> tuple[IntArray, npt.NDArray[np.bool_]]:
    """Right-pad id lists -> ids (B, S) int64 and pad mask (B, S), True = padding.

    The mask comes from the lengths, not the ids: a model's end token may share padding's id."""
    width = max(len(s) for s in sequences)
    ids = np.full((len(sequences), width), pad_id, dtype=np.int64)
    mask = np.ones((len(sequences), width), dtype=np.bool_)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = seq
        mask[row, : len(seq)] = False
    return ids, mask


@dataclass(frozen=True)
class SearchOptions:
    """What one search call does. `Translator.options` fills them from the bundle's defaults."""

    beam_size: int = 1
    n_best: int = 1
    alpha: float = 0.6  # length penalty (its form is the bundle's: manifest.search.length_penalty)
    # GNMT's coverage penalty beta, over the bundle's default attention view: ranks down beams
    # that leave source tokens unattended (dropped words). 0.2 as in GNMT and OpenNMT's `wu`;
    # BLEU-neutral on the en-zh dev split (docs/models.md), and it keeps names from being dropped.
    coverage_penalty: float = 0.2
    max_output_tokens: int | None = None  # None: the bundle's default cap (EOS included)


class Translator:
    """A loaded bundle: its ONNX model and both tokenizers."""

    def __init__(self, bundle: Bundle, session_config: SessionConfig | None = None) -> None:
        self.bundle = bundle
        self.manifest = bundle.manifest
        self.model = OnnxSeq2Seq(bundle, session_config)
        self.src_tokenizer, self.tgt_tokenizer = load_tokenizers(bundle)

    def options(
        self,
        beam_size: int | None = None,
        n_best: int = 1,
        max_output_tokens: int | None = None,
        alpha: float | None = None,
    ) -> SearchOptions:
        """The bundle's default search (manifest.search), with what the caller sets instead."""
        defaults = self.manifest.search
        return SearchOptions(
            beam_size=defaults.beam_size if beam_size is None else beam_size,
            n_best=n_best,
            alpha=defaults.alpha if alpha is None else alpha,
            coverage_penalty=defaults.coverage_penalty,
            max_output_tokens=max_output_tokens,
        )

    def max_lengths(self, src_lengths: list[int], max_output_tokens: int | None) -> IntArray:
        """Each sentence's cap on generated tokens (EOS included): the model's limit, the bundle's
        default or the request's cap, and (own models) twice the source plus slack."""
        search = self.manifest.search
        limit = self.manifest.limits.max_target_tokens
        for cap in (search.max_output_tokens, max_output_tokens):
            limit = limit if cap is None else min(limit, cap)
        if not search.relative_cap:
            return np.full(len(src_lengths), limit, dtype=np.int64)
        return np.array([max_output_length(n, limit) for n in src_lengths], dtype=np.int64)

    def search_ids(self, src_ids: list[list[int]], options: SearchOptions) -> list[list[Hypothesis]]:
        """Decode source id lists (each ending in EOS) in one batch; n_best hypotheses each."""
        special = self.manifest.special_ids
        ids, mask = pad_ids(src_ids, special.pad)  # (B, S)
        state = self.model.encode(ids, mask)
        max_lengths = self.max_lengths([len(s) for s in src_ids], options.max_output_tokens)
        scoring = self.scoring(options)
        ends = (special.bos, special.eos)
        if options.beam_size == 1:
            return [[h] for h in greedy_search(self.model, state, max_lengths, *ends, scoring)]
        return beam_search(self.model, state, max_lengths, *ends, options.beam_size, options.n_best, scoring)

    def scoring(self, options: SearchOptions) -> Scoring:
        search = self.manifest.search
        return Scoring(
            alpha=options.alpha,
            length_penalty=search.length_penalty,
            coverage=self._coverage(options.coverage_penalty),
            stopping=search.stopping,
            forced_eos=search.forced_eos,
        )

    def _coverage(self, beta: float) -> Coverage | None:
        """The coverage penalty over the default attention view: (T, L, N, S) -> score bonus."""
        if not beta:
            return None
        view = self.manifest.attention_view
        return lambda attention: coverage_penalty(select_heads(attention, view.layer, view.heads), beta)

    def source_ids(self, texts: list[str]) -> list[list[int]]:
        """Token ids with EOS; sources over the limit are cut to it (evaluation's rule; the API refuses them)."""
        limits, special = self.manifest.limits, self.manifest.special_ids
        return truncated_source_ids(self.src_tokenizer.encode_ids(texts), limits.max_source_tokens, special.eos)

    def translate_texts(self, texts: list[str], options: SearchOptions, batch_size: int = 32) -> list[str]:
        """Best translation of each text, in input order, decoded in length-sorted batches."""
        best = best_in_length_order(lambda chunk: self.search_ids(chunk, options), self.source_ids(texts), batch_size)
        return [self.tgt_tokenizer.decode_text(h.tokens) for h in best]
