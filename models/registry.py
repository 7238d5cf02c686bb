"""The model families by name: one place that maps a config to its module."""

from __future__ import annotations

from torch import nn

from models.config import ModelConfig, RNNConfig, TransformerConfig
from models.rnn import RNNSeq2Seq
from models.transformer import Transformer

Seq2Seq = RNNSeq2Seq | Transformer

FAMILIES: dict[str, type[nn.Module]] = {"rnn": RNNSeq2Seq, "transformer": Transformer}


def build_model(cfg: ModelConfig) -> Seq2Seq:
    """A freshly initialised model for `cfg` (vocab sizes must be filled in)."""
    if cfg.src_vocab <= 0 or cfg.tgt_vocab <= 0:
        raise ValueError("model config needs src_vocab and tgt_vocab (taken from the tokenizers)")
    if isinstance(cfg, RNNConfig):
        return RNNSeq2Seq(cfg)
    if isinstance(cfg, TransformerConfig):
        return Transformer(cfg)
    raise TypeError(f"unknown model config {type(cfg).__name__}")


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
