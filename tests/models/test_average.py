"""Checkpoint averaging: the element-wise mean, refused across different models or tokenizers."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from models.average import AverageError, average_checkpoints, average_to
from models.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from models.config import RunConfig
from models.registry import build_model
from service.engine.tokenizer import Tokenizer
from tests.conftest import cli
from tests.support.families import tiny_configs

CONFIG = tiny_configs()["transformer"]


def write(path: Path, seed: int, en: Tokenizer, zh: Tokenizer, config: object = CONFIG) -> Path:
    torch.manual_seed(seed)
    save_checkpoint(path, Checkpoint(RunConfig(model=config), build_model(config), en, zh, {"epoch": seed}))  # type: ignore[arg-type]
    return path


def test_the_average_is_the_elementwise_mean(tmp_path: Path, en_tokenizer: Tokenizer, zh_tokenizer: Tokenizer) -> None:
    paths = [write(tmp_path / f"{s}.pt", s, en_tokenizer, zh_tokenizer) for s in range(3)]
    states = [load_checkpoint(p).model.state_dict() for p in paths]
    averaged = average_checkpoints(paths)
    for key, value in averaged.model.state_dict().items():
        torch.testing.assert_close(value, sum(s[key] for s in states) / 3)
    assert averaged.progress["averaged_from"] == [str(p) for p in paths]
    out = average_to(paths, tmp_path / "avg" / "best.pt")
    assert load_checkpoint(tmp_path / "avg" / "best.pt").config == out.config


def test_averaging_refuses_different_models_and_missing_files(
    tmp_path: Path, en_tokenizer: Tokenizer, zh_tokenizer: Tokenizer
) -> None:
    a = write(tmp_path / "a.pt", 0, en_tokenizer, zh_tokenizer)
    bigger = dataclasses.replace(CONFIG, ff_dim=CONFIG.ff_dim * 2)  # type: ignore[type-var]
    b = write(tmp_path / "b.pt", 1, en_tokenizer, zh_tokenizer, bigger)
    with pytest.raises(AverageError, match="different model config"):
        average_checkpoints([a, b])
    swapped = write(tmp_path / "c.pt", 2, zh_tokenizer, en_tokenizer)
    with pytest.raises(AverageError, match="different tokenizers"):
        average_checkpoints([a, swapped])
    with pytest.raises(AverageError, match="no such checkpoint"):
        average_to([a, tmp_path / "missing.pt"], tmp_path / "out.pt")
    done = cli("average", a, tmp_path / "missing.pt", "--out", tmp_path / "o")
    assert done.returncode == 2 and "no such checkpoint" in done.stderr
