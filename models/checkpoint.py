"""Checkpoints that describe themselves: config, weights, both tokenizers and training progress.

`best.pt` (for evaluation and export) holds the model; `last.pt` adds the optimizer, the schedule
and the position in the epoch, so `train --resume` continues exactly where it stopped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from models.config import RunConfig, run_config_from_dict
from models.registry import Seq2Seq, build_model
from service.engine.tokenizer import Tokenizer

FORMAT_VERSION = 1


@dataclass
class Checkpoint:
    config: RunConfig
    model: Seq2Seq
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    progress: dict[str, Any] = field(default_factory=dict)  # epoch, step, best dev BLEU, history
    training_state: dict[str, Any] | None = None  # optimizer, scheduler, rng; only in last.pt


def save_checkpoint(path: Path, ckpt: Checkpoint) -> None:
    """Write atomically: a crash mid-write never leaves a truncated checkpoint behind."""
    payload = {
        "format_version": FORMAT_VERSION,
        "config": ckpt.config.to_dict(),
        "state_dict": ckpt.model.state_dict(),
        "tokenizers": {"source": ckpt.src_tokenizer.model_proto, "target": ckpt.tgt_tokenizer.model_proto},
        "progress": ckpt.progress,
        "training_state": ckpt.training_state,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Rebuild the model (in eval mode) and tokenizers from one file."""
    payload = torch.load(Path(path), map_location="cpu", weights_only=True)
    if payload.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path}: checkpoint format {payload.get('format_version')}, expected {FORMAT_VERSION}")
    config = run_config_from_dict(payload["config"])
    model = build_model(config.model)
    model.load_state_dict(payload["state_dict"])
    model.eval()
    return Checkpoint(
        config=config,
        model=model,
        src_tokenizer=Tokenizer(payload["tokenizers"]["source"]),
        tgt_tokenizer=Tokenizer(payload["tokenizers"]["target"]),
        progress=payload.get("progress") or {},
        training_state=payload.get("training_state"),
    )
