"""A checkpoint in fp16 parts and back (how weights leave a lent GPU)."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest
import torch

from models.checkpoint import Checkpoint
from models.config import load_run_config
from models.packing import pack, unpack
from models.registry import build_model
from models.vocab import train_tokenizer
from tests.conftest import TINY_CONFIG


def test_parts_join_back_into_the_same_weights_with_tied_ones_stored_once(tmp_path: Path) -> None:
    config = load_run_config(TINY_CONFIG)
    model_config = dataclasses.replace(config.model, src_vocab=120, tgt_vocab=120, share_embeddings=True)
    config = dataclasses.replace(config, model=model_config)
    torch.manual_seed(0)
    model = build_model(config.model)
    tokenizer = train_tokenizer([f"Tom has {i} apples." for i in range(300)] + ["汤姆有苹果。"] * 50, "zh", 120)
    ckpt = Checkpoint(config, model, tokenizer, tokenizer, {"best_epoch": 3})

    parts = pack(ckpt, tmp_path, "run.best", part_bytes=20_000)
    assert len(parts) > 1 and all(p.stat().st_size <= 20_000 for p in parts)
    unique = {t.data_ptr(): t.numel() for t in model.state_dict().values()}
    assert sum(p.stat().st_size for p in parts) < 2 * sum(unique.values()) + 200_000  # tied tables once
    # ... and directly: the three names of the one table share one stored tensor
    blob = b"".join(p.read_bytes() for p in parts)
    stored = torch.load(io.BytesIO(blob), weights_only=True)["state_dict"]
    tied = {stored[k].data_ptr() for k in ("src_embed.weight", "tgt_embed.weight", "output.weight")}
    assert len(tied) == 1

    back = unpack(tmp_path, "run.best")
    assert back.progress == {"best_epoch": 3} and back.config == config
    for (name, a), b in zip(model.state_dict().items(), back.model.state_dict().values(), strict=True):
        assert b.dtype == a.dtype, name
        torch.testing.assert_close(b, a, atol=1e-3, rtol=1e-3)
    assert back.model.tgt_embed is back.model.src_embed  # still one table
    with pytest.raises(FileNotFoundError, match=r"no other\.part"):
        unpack(tmp_path, "other")
