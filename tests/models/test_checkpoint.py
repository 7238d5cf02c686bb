from __future__ import annotations

from pathlib import Path

import torch

from models.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from models.config import RunConfig
from models.registry import build_model
from service.engine.tokenizer import Tokenizer
from tests.support.families import tiny_configs


def test_a_checkpoint_rebuilds_its_model_alone(
    tmp_path: Path, en_tokenizer: Tokenizer, zh_tokenizer: Tokenizer
) -> None:
    for name, model_config in tiny_configs().items():
        torch.manual_seed(0)
        model = build_model(model_config).eval()
        path = tmp_path / f"{name}.pt"
        save_checkpoint(
            path, Checkpoint(RunConfig(model=model_config), model, en_tokenizer, zh_tokenizer, {"epoch": 3})
        )
        loaded = load_checkpoint(path)
        assert loaded.config.model == model_config
        assert loaded.progress == {"epoch": 3}
        assert loaded.src_tokenizer.model_proto == en_tokenizer.model_proto
        assert loaded.tgt_tokenizer.encode("汤姆追杰瑞。").ids == zh_tokenizer.encode("汤姆追杰瑞。").ids
        src = torch.tensor([[5, 6, 7, 3]])
        mask = torch.zeros_like(src, dtype=torch.bool)
        tgt = torch.tensor([[2, 5, 6]])
        with torch.no_grad():
            torch.testing.assert_close(loaded.model(src, mask, tgt).logits, model(src, mask, tgt).logits)
        assert not path.with_name(path.name + ".tmp").exists()
