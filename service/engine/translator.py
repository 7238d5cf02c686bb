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
from service.engine.joining import join
from service.engine.onnx_model import OnnxSeq2Seq, OnnxState, SessionConfig
from service.engine.search import (
    BeamDecode,
    Cohort,
    Coverage,
    Decode,
    FloatArray,
    GreedyDecode,
    Hypothesis,
    IntArray,
    Scoring,
    best_in_length_order,
    coverage_penalty,
    max_output_length,
    truncated_source_ids,
)
from service.engine.segmentation import Piece, Segmenter
from service.engine.text import normalize
from service.engine.tokenizer import Encoding
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
    no_repeat_ngram: int = 0  # 0: off
    repetition_penalty: float = 1.0  # 1.0: off


class Translator:
    """A loaded bundle: its ONNX model and both tokenizers."""

    def __init__(self, bundle: Bundle, session_config: SessionConfig | None = None) -> None:
        self.bundle = bundle
        self.manifest = bundle.manifest
        self.model = OnnxSeq2Seq(bundle, session_config)
        self.src_tokenizer, self.tgt_tokenizer = load_tokenizers(bundle)
        m = self.manifest
        self.segmenter = Segmenter(self.src_tokenizer, m.source_lang, m.limits.max_source_tokens)

    def options(
        self,
        beam_size: int | None = None,
        n_best: int = 1,
        max_output_tokens: int | None = None,
        alpha: float | None = None,
        no_repeat_ngram: int | None = None,
        repetition_penalty: float | None = None,
    ) -> SearchOptions:
        """The bundle's default search (manifest.search), with what the caller sets instead."""
        d = self.manifest.search
        return SearchOptions(
            beam_size=d.beam_size if beam_size is None else beam_size,
            n_best=n_best,
            alpha=d.alpha if alpha is None else alpha,
            coverage_penalty=d.coverage_penalty,
            max_output_tokens=max_output_tokens,
            no_repeat_ngram=d.no_repeat_ngram if no_repeat_ngram is None else no_repeat_ngram,
            repetition_penalty=d.repetition_penalty if repetition_penalty is None else repetition_penalty,
        )

    def max_lengths(self, src_lengths: list[int], max_output_tokens: int | None) -> IntArray:
        """Each sentence's cap on generated tokens (EOS included): the model's limit, the bundle's
        default or the request's cap, and the bundle's cap relative to the source length."""
        search = self.manifest.search
        limit = self.manifest.limits.max_target_tokens
        for cap in (search.max_output_tokens, max_output_tokens):
            limit = limit if cap is None else min(limit, cap)
        ratio = search.max_output_ratio
        if ratio is None:
            return np.full(len(src_lengths), limit, dtype=np.int64)
        caps = [max_output_length(n, limit, ratio, search.max_output_slack) for n in src_lengths]
        return np.array(caps, dtype=np.int64)

    def begin(self, src_ids: list[list[int]], options: SearchOptions) -> Cohort[OnnxState]:
        """Encode source id lists (each ending in EOS) as one batch, ready to decode step by step."""
        special = self.manifest.special_ids
        ids, mask = pad_ids(src_ids, special.pad)  # (B, S)
        state = self.model.encode(ids, mask)
        max_lengths = self.max_lengths([len(s) for s in src_ids], options.max_output_tokens)
        scoring = self.scoring(options)
        ends = (special.bos, special.eos)
        decode: Decode
        if options.beam_size == 1:
            decode = GreedyDecode(max_lengths, *ends, scoring)
        else:
            decode = BeamDecode(max_lengths, *ends, options.beam_size, options.n_best, scoring)
        return Cohort(self.model, state, decode, width=ids.shape[1])

    def search_ids(self, src_ids: list[list[int]], options: SearchOptions) -> list[list[Hypothesis]]:
        """Decode source id lists (each ending in EOS) in one batch; n_best hypotheses each."""
        return self.begin(src_ids, options).run(len(src_ids))

    def scoring(self, options: SearchOptions) -> Scoring:
        search = self.manifest.search
        return Scoring(
            alpha=options.alpha,
            length_penalty=search.length_penalty,
            coverage=self._coverage(options.coverage_penalty),
            stopping=search.stopping,
            forced_eos=search.forced_eos,
            no_repeat_ngram=options.no_repeat_ngram,
            repetition_penalty=options.repetition_penalty,
            renormalize=search.renormalize,
        )

    def score(self, token_log_probs: list[float], attention: FloatArray, options: SearchOptions) -> float:
        """A hypothesis' score as the search gives it: log-prob over the length penalty, plus coverage."""
        scoring = self.scoring(options)
        bonus = scoring.coverage(attention) if scoring.coverage else 0.0
        return scoring.normalised(sum(token_log_probs), len(token_log_probs)) + bonus

    def _coverage(self, beta: float) -> Coverage | None:
        """The coverage penalty over the default attention view: (T, L, N, S) -> score bonus."""
        if not beta:
            return None
        view = self.manifest.attention_view
        return lambda attention: coverage_penalty(select_heads(attention, view.layer, view.heads), beta)

    def source_ids(self, texts: list[str]) -> list[list[int]]:
        """Token ids with EOS, each text taken as one sentence and cut at the limit (parity checks)."""
        limits, special = self.manifest.limits, self.manifest.special_ids
        return truncated_source_ids(self.src_tokenizer.encode_ids(texts), limits.max_source_tokens, special.eos)

    def segment(self, text: str) -> list[Piece]:
        """The pieces of a (normalised) text the model translates one by one: sentences, clauses."""
        return self.segmenter(text)

    def segment_encoded(self, text: str) -> list[tuple[Piece, Encoding]]:
        """`segment`'s pieces, each with its source encoding."""
        return self.segmenter.encoded(text)

    def translate_texts(self, texts: list[str], options: SearchOptions, batch_size: int = 32) -> list[str]:
        """Best translation of each text, as the service gives it: the text cut into sentences (and
        over-long sentences into clauses), the pieces decoded in length-sorted batches, then joined."""
        texts = [normalize(t) for t in texts]
        pieces = [self.segment(t) for t in texts]
        eos = self.manifest.special_ids.eos
        flat = [[*ids, eos] for t, ps in zip(texts, pieces, strict=True) for ids in self._piece_ids(t, ps)]
        best = best_in_length_order(lambda chunk: self.search_ids(chunk, options), flat, batch_size)
        outputs = iter(self.tgt_tokenizer.decode_text(h.tokens) for h in best)
        return [join(t, ps, [next(outputs) for _ in ps])[0] for t, ps in zip(texts, pieces, strict=True)]

    def _piece_ids(self, text: str, pieces: list[Piece]) -> list[list[int]]:
        return self.src_tokenizer.encode_ids([text[p.start : p.end] for p in pieces]) if pieces else []
