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
    beam_search,
    best_in_length_order,
    coverage_penalty,
    greedy_search,
    max_output_length,
    truncated_source_ids,
)
from service.engine.tokenizer import PAD_ID, Tokenizer


def pad_ids(sequences: list[list[int]]) -> tuple[IntArray, npt.NDArray[np.bool_]]:
    """Right-pad id lists -> ids (B, S) int64 and pad mask (B, S), True = padding."""
    width = max(len(s) for s in sequences)
    ids = np.full((len(sequences), width), PAD_ID, dtype=np.int64)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = seq
    return ids, ids == PAD_ID


@dataclass(frozen=True)
class SearchOptions:
    beam_size: int = 1
    n_best: int = 1
    alpha: float = 0.6  # length penalty
    # GNMT's coverage penalty beta, over the bundle's default attention view: ranks down beams
    # that leave source tokens unattended (dropped words). 0.2 as in GNMT and OpenNMT's `wu`;
    # BLEU-neutral on the en-zh dev split (docs/models.md), and it keeps names from being dropped.
    coverage_penalty: float = 0.2
    max_output_tokens: int | None = None  # None: from the source length, capped by the bundle's limit


class Translator:
    """A loaded bundle: its ONNX model and both tokenizers."""

    def __init__(self, bundle: Bundle, session_config: SessionConfig | None = None) -> None:
        self.bundle = bundle
        self.manifest = bundle.manifest
        self.model = OnnxSeq2Seq(bundle, session_config)
        self.src_tokenizer = Tokenizer.from_file(bundle.file(self.manifest.tokenizers.source))
        self.tgt_tokenizer = Tokenizer.from_file(bundle.file(self.manifest.tokenizers.target))

    def search_ids(self, src_ids: list[list[int]], options: SearchOptions) -> list[list[Hypothesis]]:
        """Decode source id lists (each ending in EOS) in one batch; n_best hypotheses each."""
        ids, mask = pad_ids(src_ids)  # (B, S)
        state = self.model.encode(ids, mask)
        limit = self.manifest.limits.max_target_tokens
        if options.max_output_tokens is not None:
            limit = min(limit, options.max_output_tokens)
        max_lengths = np.array([max_output_length(len(s), limit) for s in src_ids], dtype=np.int64)
        special = self.manifest.special_ids
        coverage = self._coverage(options.coverage_penalty)
        ends = (special.bos, special.eos)
        if options.beam_size == 1:
            return [[h] for h in greedy_search(self.model, state, max_lengths, *ends, options.alpha, coverage)]
        return beam_search(
            self.model, state, max_lengths, *ends, options.beam_size, options.n_best, options.alpha, coverage
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
