"""Decoding a PyTorch model with the service's own search (service.engine.search).

`TorchStepModel` adapts a model's `decode_step` to the search's step protocol, so training-time
BLEU, evaluation and the served ONNX engine all run one search implementation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from models.batching import pad
from models.seq2seq import Seq2SeqModel
from service.engine.joining import join
from service.engine.search import (
    FloatArray,
    Hypothesis,
    IntArray,
    Scoring,
    beam_search,
    best_in_length_order,
    greedy_search,
    max_output_length,
    suppress,
    truncated_source_ids,
)
from service.engine.segmentation import Segmenter
from service.engine.text import normalize
from service.engine.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer


@dataclass
class TorchState:
    statics: dict[str, Tensor]
    src_pad_mask: Tensor
    state: dict[str, Tensor]

    def select(self, rows: Tensor) -> TorchState:
        return TorchState(
            statics={k: v.index_select(0, rows) for k, v in self.statics.items()},
            src_pad_mask=self.src_pad_mask.index_select(0, rows),
            state={k: v.index_select(0, rows) for k, v in self.state.items()},
        )


class TorchStepModel:
    """One decode_step per search step; every state tensor has its batch on axis 0."""

    def __init__(self, model: Seq2SeqModel) -> None:
        self.model = model
        self.device = next(model.parameters()).device

    def step(self, tokens: IntArray, state: TorchState) -> tuple[FloatArray, FloatArray, TorchState]:
        prev = torch.from_numpy(tokens).to(self.device)
        out = self.model.decode_step(prev, state.statics, state.src_pad_mask, state.state)
        new_state = TorchState(state.statics, state.src_pad_mask, out.state)
        log_probs = suppress(out.log_probs.float().cpu().numpy(), (PAD_ID, BOS_ID))
        return log_probs, out.cross_attention.float().cpu().numpy(), new_state

    def reorder(self, state: TorchState, rows: IntArray) -> TorchState:
        return state.select(torch.from_numpy(rows).to(self.device))


@torch.inference_mode()
def translate_ids(
    model: Seq2SeqModel,
    src_ids: list[list[int]],
    max_tgt_tokens: int,
    beam_size: int = 1,
    n_best: int = 1,
    alpha: float = 0.6,
    no_repeat_ngram: int = 0,
) -> list[list[Hypothesis]]:
    """Decode a batch of source id lists (EOS included); n_best hypotheses each, best first."""
    device = next(model.parameters()).device
    ids, mask = pad(src_ids)  # (B, S)
    ids, mask = ids.to(device), mask.to(device)
    enc = model.encode(ids, mask)
    state = TorchState(enc.statics, mask, enc.state)
    max_lengths = np.array([max_output_length(len(s), max_tgt_tokens) for s in src_ids], dtype=np.int64)
    step_model = TorchStepModel(model)
    scoring = Scoring(alpha=alpha, no_repeat_ngram=no_repeat_ngram)
    if beam_size == 1:
        return [[h] for h in greedy_search(step_model, state, max_lengths, BOS_ID, EOS_ID, scoring)]
    return beam_search(step_model, state, max_lengths, BOS_ID, EOS_ID, beam_size, n_best, scoring)


def translate_texts(
    model: Seq2SeqModel,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    texts: list[str],
    max_src_tokens: int,
    max_tgt_tokens: int,
    beam_size: int = 1,
    batch_size: int = 64,
    source_lang: str = "en",
    no_repeat_ngram: int = 0,
) -> list[str]:
    """Translate texts as the service does: each cut into sentences (an over-long one into clauses),
    the pieces decoded in length-sorted batches, the translations joined back in input order."""
    texts = [normalize(t) for t in texts]
    segmenter = Segmenter(src_tokenizer, source_lang, max_src_tokens)
    pieces = [segmenter(t) for t in texts]
    flat = [t[p.start : p.end] for t, ps in zip(texts, pieces, strict=True) for p in ps]
    encoded = truncated_source_ids(src_tokenizer.encode_ids(flat), max_src_tokens, EOS_ID)
    best = best_in_length_order(
        lambda chunk: translate_ids(model, chunk, max_tgt_tokens, beam_size, no_repeat_ngram=no_repeat_ngram),
        encoded,
        batch_size,
    )
    outputs = iter(tgt_tokenizer.decode_text(h.tokens) for h in best)
    return [join(t, ps, [next(outputs) for _ in ps])[0] for t, ps in zip(texts, pieces, strict=True)]
