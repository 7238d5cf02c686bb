"""Both families: incremental decoding equals teacher forcing, padding changes nothing,
attention rows are distributions with exact zeros on padding."""

from __future__ import annotations

import pytest
import torch

from models.config import SCORE_FUNCTIONS
from models.registry import FAMILIES, build_model
from tests.support.families import SRC_VOCAB, TGT_VOCAB, tiny_configs

CASES = tiny_configs()
BOS = 2


def batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = [7, 4, 6]
    src = torch.randint(4, SRC_VOCAB, (3, 7), generator=g)
    mask = torch.arange(7)[None, :] >= torch.tensor(lengths)[:, None]  # (B, S) True = pad
    src = src.masked_fill(mask, 0)
    tgt = torch.randint(4, TGT_VOCAB, (3, 6), generator=g)
    tgt[:, 0] = BOS
    return src, mask, tgt


def incremental(model: torch.nn.Module, src, mask, tgt) -> tuple[torch.Tensor, torch.Tensor]:
    enc = model.encode(src, mask)
    state, log_probs, attention = enc.state, [], []
    for t in range(tgt.shape[1]):
        out = model.decode_step(tgt[:, t], enc.statics, mask, state)
        state = out.state
        log_probs.append(out.log_probs)
        attention.append(out.cross_attention)
    return torch.stack(log_probs, 1), torch.stack(attention, 3)  # (B, T, V), (B, L, N, T, S)


def test_every_family_has_a_case() -> None:
    families = {cfg.family for cfg in CASES.values()}
    assert families == set(FAMILIES)
    scores = {getattr(cfg, "attention", None) for cfg in CASES.values()} - {None}
    assert scores == set(SCORE_FUNCTIONS)


@pytest.mark.parametrize("name", CASES)
def test_decode_step_equals_teacher_forcing(name: str) -> None:
    torch.manual_seed(0)
    model = build_model(CASES[name]).eval()
    src, mask, tgt = batch()
    with torch.no_grad():
        forced = model(src, mask, tgt)
        step_lp, step_attn = incremental(model, src, mask, tgt)
    assert (step_lp - forced.logits.log_softmax(-1)).abs().max().item() <= 1e-5
    assert (step_attn - forced.cross_attention).abs().max().item() <= 1e-5


@pytest.mark.parametrize("name", CASES)
def test_attention_rows_are_distributions(name: str) -> None:
    torch.manual_seed(1)
    model = build_model(CASES[name]).eval()
    src, mask, tgt = batch(1)
    with torch.no_grad():
        attn = model(src, mask, tgt).cross_attention  # (B, L, N, T, S)
    B, L, N, T, S = attn.shape
    assert (B, T, S) == (3, 6, 7)
    torch.testing.assert_close(attn.sum(-1), torch.ones(B, L, N, T))
    assert torch.all(attn.masked_select(mask[:, None, None, None, :].expand_as(attn)) == 0.0)


@pytest.mark.parametrize("name", CASES)
def test_padding_a_batch_changes_no_sequence(name: str) -> None:
    torch.manual_seed(2)
    model = build_model(CASES[name]).eval()
    src, mask, tgt = batch(2)
    with torch.no_grad():
        together = model(src, mask, tgt)
        for b in range(3):
            n = int((~mask[b]).sum())
            alone = model(src[b : b + 1, :n], mask[b : b + 1, :n], tgt[b : b + 1])
            torch.testing.assert_close(together.logits[b], alone.logits[0], atol=1e-5, rtol=0)
            torch.testing.assert_close(
                together.cross_attention[b, ..., :n], alone.cross_attention[0], atol=1e-6, rtol=0
            )


def test_transformer_reports_every_layer_and_head() -> None:
    cfg = CASES["transformer"]
    model = build_model(cfg).eval()
    src, mask, tgt = batch()
    with torch.no_grad():
        out = model(src, mask, tgt, need_weights=True)
        enc = model.encode(src, mask)
        step = model.decode_step(tgt[:, 0], enc.statics, mask, enc.state)
    assert out.cross_attention.shape == (3, cfg.dec_layers, cfg.heads, 6, 7)
    assert out.decoder_self_attention is not None and out.decoder_self_attention.shape == (3, 2, 4, 6, 6)
    assert out.encoder_self_attention is not None and out.encoder_self_attention.shape == (3, 2, 4, 7, 7)
    # causal: no weight on future target positions
    assert torch.all(out.decoder_self_attention.triu(1) == 0.0)
    assert step.cross_attention.shape == (3, cfg.dec_layers, cfg.heads, 7)
    assert step.state["past_key.0"].shape == (3, cfg.heads, 1, cfg.d_model // cfg.heads)


def test_modules_store_no_attention() -> None:
    model = build_model(CASES["rnn-additive"]).eval()
    before = {k for m in model.modules() for k in vars(m)}
    src, mask, tgt = batch()
    with torch.no_grad():
        model(src, mask, tgt)
    assert {k for m in model.modules() for k in vars(m)} == before
