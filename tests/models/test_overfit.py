"""A tiny model of each family memorises 20 pairs until greedy decoding reproduces them exactly."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from models.batching import pad
from models.config import RNNConfig, TransformerConfig
from models.decoding import translate_ids
from models.registry import build_model
from service.engine.tokenizer import BOS_ID, EOS_ID, PAD_ID

VOCAB = 24


def twenty_pairs() -> tuple[list[list[int]], list[list[int]]]:
    g = torch.Generator().manual_seed(7)
    src, tgt = [], []
    for _ in range(20):
        n = int(torch.randint(3, 8, (1,), generator=g))
        s = torch.randint(4, VOCAB, (n,), generator=g).tolist()
        src.append([*s, EOS_ID])
        tgt.append([*(x // 2 + 4 for x in reversed(s)), EOS_ID])  # a learnable, reordering mapping
    return src, tgt


CONFIGS = {
    "transformer": TransformerConfig(
        src_vocab=VOCAB,
        tgt_vocab=VOCAB,
        d_model=64,
        heads=4,
        ff_dim=128,
        enc_layers=2,
        dec_layers=2,
        dropout=0.0,
        max_positions=32,
    ),
    "rnn-additive": RNNConfig(
        src_vocab=VOCAB,
        tgt_vocab=VOCAB,
        emb_dim=32,
        enc_hidden=32,
        dec_hidden=64,
        attention="additive",
        attn_dim=32,
        dropout=0.0,
    ),
    "rnn-dot": RNNConfig(
        src_vocab=VOCAB,
        tgt_vocab=VOCAB,
        emb_dim=32,
        enc_hidden=32,
        dec_hidden=64,
        attention="dot",
        dropout=0.0,
    ),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_overfits_twenty_pairs(name: str) -> None:
    torch.manual_seed(0)
    model = build_model(CONFIGS[name])
    src, tgt = twenty_pairs()
    src_ids, src_mask = pad(src)
    tgt_ids, _ = pad([[BOS_ID, *t] for t in tgt])
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    reproduced = False
    for step in range(1, 1001):
        model.train()
        logits = model(src_ids, src_mask, tgt_ids[:, :-1]).logits
        loss = F.cross_entropy(logits.transpose(1, 2), tgt_ids[:, 1:], ignore_index=PAD_ID)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            model.eval()
            hyps = translate_ids(model, src, max_tgt_tokens=16, beam_size=1)
            if [h[0].tokens for h in hyps] == tgt:
                reproduced = True
                break
    assert reproduced, f"{name} did not memorise 20 pairs in {step} steps (loss {loss.item():.3f})"
    beam = translate_ids(model, src, max_tgt_tokens=16, beam_size=4)
    assert [h[0].tokens for h in beam] == tgt
