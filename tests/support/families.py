"""Tiny configs for every model family and score function (shared by model and export tests)."""

from __future__ import annotations

from typing import Any

from models.config import SCORE_FUNCTIONS, ModelConfig, RNNConfig, TransformerConfig

SRC_VOCAB, TGT_VOCAB = 40, 30


def tiny_configs(dropout: float = 0.0) -> dict[str, ModelConfig]:
    """One case per family variant, named e.g. `rnn-additive` or `transformer`."""
    rnn: dict[str, Any] = dict(
        src_vocab=SRC_VOCAB, tgt_vocab=TGT_VOCAB, emb_dim=16, enc_hidden=12, dec_hidden=24, attn_dim=10, dropout=dropout
    )
    cases: dict[str, ModelConfig] = {f"rnn-{score}": RNNConfig(**rnn, attention=score) for score in SCORE_FUNCTIONS}
    cases["rnn-2layer"] = RNNConfig(**rnn, attention="additive", enc_layers=2)
    cases["rnn-luong"] = RNNConfig(**rnn, attention="additive", query="current", init="zero")
    cases["transformer"] = TransformerConfig(
        src_vocab=SRC_VOCAB,
        tgt_vocab=TGT_VOCAB,
        d_model=32,
        heads=4,
        ff_dim=48,
        enc_layers=2,
        dec_layers=2,
        dropout=dropout,
        max_positions=64,
    )
    return cases
