"""What every model family returns: the shapes that training, search and export rely on.

Both families expose `encode`, a one-step `decode_step` and the teacher-forced `forward`.
Every tensor in `statics` and `state` has its batch on axis 0, so the search can reorder rows
without knowing the family. Cross-attention is always (..., L, N, ..., S): the RNN reports one
layer and one head.

Legend: B batch, S source length, T target length, V target vocabulary, L layers, N heads.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from torch import Tensor
from torch.nn import Parameter


@dataclass
class Encoded:
    statics: dict[str, Tensor]  # per-source tensors every step reads, e.g. keys (B, ...)
    state: dict[str, Tensor]  # the decoder state before the first step (B, ...)
    self_attention: Tensor | None = None  # encoder self-attention (B, L, N, S, S), Transformer only


@dataclass
class StepOutput:
    log_probs: Tensor  # (B, V)
    cross_attention: Tensor  # (B, L, N, S)
    state: dict[str, Tensor]
    self_attention: Tensor | None = None  # (B, L, N, P+1) over the target so far, Transformer only


@dataclass
class ForwardOutput:
    logits: Tensor  # (B, T, V)
    cross_attention: Tensor  # (B, L, N, T, S)
    decoder_self_attention: Tensor | None = None  # (B, L, N, T, T), Transformer only
    encoder_self_attention: Tensor | None = None  # (B, L, N, S, S), Transformer only


class Seq2SeqModel(Protocol):
    """What decoding and export need of a model family."""

    def encode(self, src_ids: Tensor, src_pad_mask: Tensor) -> Encoded: ...

    def decode_step(
        self, prev_tokens: Tensor, statics: dict[str, Tensor], src_pad_mask: Tensor, state: dict[str, Tensor]
    ) -> StepOutput: ...

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]: ...
