"""Looking inside one translation: every layer and head, forced decoding, self-attention.

The decoder is run step by step on a given target (a user's translation, or the model's own
greedy output), recording the log-prob of each target token and the attention of every step.

Legend: T target tokens (with EOS), S source tokens (with EOS), L layers, N heads.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from service.engine.search import suppress
from service.engine.translator import Translator, pad_ids


def force(translator: Translator, src_ids: list[int], tgt_ids: list[int]) -> dict[str, npt.NDArray[Any]]:
    """Teacher-force `tgt_ids` (ending in EOS): log-probs (T,), cross (T, L, N, S), self (T, L, N, T) or empty."""
    ids, mask = pad_ids([src_ids], translator.manifest.special_ids.pad)
    S, model = len(src_ids), translator.model
    state = model.encode(ids, mask)
    prev = translator.manifest.special_ids.bos
    log_probs, cross, self_rows = [], [], []
    for token in tgt_ids:
        outputs, state = model.run_step(np.array([prev], dtype=np.int64), state)
        row = suppress(outputs["log_probs"][:1], model.suppressed, model.renormalize)  # as the search sees it
        log_probs.append(float(row[0, token]))
        cross.append(outputs["cross_attention"][0, ..., :S])  # (L, N, S): the source was padded to a chunk
        if "self_attention" in outputs:
            self_rows.append(outputs["self_attention"][0])  # (L, N, t+1)
        prev = token
    T = len(tgt_ids)
    result: dict[str, npt.NDArray[Any]] = {"log_probs": np.array(log_probs), "cross": np.stack(cross)}
    if self_rows:
        L, N = self_rows[0].shape[:2]
        full = np.zeros((T, L, N, T), dtype=np.float32)  # causal: zeros above the diagonal
        for t, row in enumerate(self_rows):
            full[t, :, :, : t + 1] = row[..., : t + 1]  # a fixed-width cache has unwritten slots after
        result["self"] = full
    if "encoder_self_attention" in state.extras:
        result["encoder_self"] = state.extras["encoder_self_attention"][0, ..., :S, :S]  # (L, N, S, S)
    return result


def greedy_target(translator: Translator, src_ids: list[int]) -> list[int]:
    [[hyp]] = translator.search_ids([src_ids], translator.options(beam_size=1))
    return hyp.tokens
