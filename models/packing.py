"""A checkpoint in fp16 parts, and back: how weights leave a lent machine whose returned files are
capped (16 MiB each there). Tied weights (one tensor under several names) are stored once; the
parts join back into a float32 best.pt-style checkpoint (no training state)."""

from __future__ import annotations

import io
from pathlib import Path

import torch

from models.checkpoint import Checkpoint
from models.config import run_config_from_dict
from models.registry import build_model
from service.engine.tokenizer import Tokenizer

PART_BYTES = 15 * 2**20


def pack(ckpt: Checkpoint, out: Path, label: str, part_bytes: int = PART_BYTES) -> list[Path]:
    """Write `label`.part0, .part1, ... into `out`; returns their paths."""
    halves: dict[int, torch.Tensor] = {}  # by storage: a tied weight is halved (and saved) once
    state = {
        k: halves.setdefault(v.data_ptr(), v.half()) if v.is_floating_point() else v
        for k, v in ckpt.model.state_dict().items()
    }
    payload = {
        "config": ckpt.config.to_dict(),
        "state_dict": state,
        "tokenizers": {"source": ckpt.src_tokenizer.model_proto, "target": ckpt.tgt_tokenizer.model_proto},
        "progress": ckpt.progress,
    }
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    blob = buffer.getvalue()
    out.mkdir(parents=True, exist_ok=True)
    parts = []
    for i in range(0, len(blob), part_bytes):
        part = out / f"{label}.part{i // part_bytes}"
        part.write_bytes(blob[i : i + part_bytes])
        parts.append(part)
    return parts


def unpack(folder: Path, label: str) -> Checkpoint:
    """Join `label`.part* from `folder` into a float32 checkpoint."""
    parts = sorted(folder.glob(f"{label}.part*"), key=lambda p: int(p.name.rsplit("part", 1)[1]))
    if not parts:
        raise FileNotFoundError(f"no {label}.part* in {folder}")
    blob = b"".join(p.read_bytes() for p in parts)
    payload = torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
    config = run_config_from_dict(payload["config"])
    model = build_model(config.model)
    model.load_state_dict(payload["state_dict"])  # copy_ casts the fp16 values into fp32 parameters
    model.eval()
    tokenizers = payload["tokenizers"]
    return Checkpoint(
        config, model, Tokenizer(tokenizers["source"]), Tokenizer(tokenizers["target"]), payload["progress"]
    )
