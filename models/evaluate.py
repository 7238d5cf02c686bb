"""`attention-mt evaluate`: BLEU and chrF of a run's best checkpoint on a split or a TSV corpus.

Each pair is scored against its own reference (single reference), with sacreBLEU's `zh`
tokenizer for Chinese targets and `13a` for English.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import torch

from models.checkpoint import load_checkpoint
from models.data import default_corpus_path, file_sha256, read_corpus, split_corpus
from models.decoding import translate_texts
from models.metrics import bleu_tokenize, score


def evaluate(
    run_dir: Path,
    split: str = "test",
    corpus: Path | None = None,
    beam: int = 4,
    checkpoint: str = "best.pt",
    limit: int = 0,
) -> dict[str, Any]:
    """Translate the chosen pairs, score them, and write `eval-<name>-beam<N>.json` in run_dir."""
    torch.set_num_threads(os.cpu_count() or 1)
    ckpt = load_checkpoint(run_dir / checkpoint)
    data = ckpt.config.data
    if corpus is not None:
        pairs, name = read_corpus(corpus), corpus.stem
        corpus_path = corpus
    else:
        # The corpus the run was trained on, so its splits are the ones it was validated against.
        trained_on = ckpt.progress.get("corpus") or data.corpus
        corpus_path = Path(trained_on) if trained_on else default_corpus_path()
        pairs, name = split_corpus(read_corpus(corpus_path))[split], split
    if limit:
        pairs = pairs[:limit]
    sources = [p.text(data.source) for p in pairs]
    references = [p.text(data.target) for p in pairs]
    started = time.perf_counter()
    hypotheses = translate_texts(
        ckpt.model,
        ckpt.src_tokenizer,
        ckpt.tgt_tokenizer,
        sources,
        data.max_src_tokens,
        data.max_tgt_tokens,
        beam,
    )
    seconds = time.perf_counter() - started
    result = {
        **score(hypotheses, references, data.target),
        "sentences": len(pairs),
        "split": None if corpus is not None else split,
        "corpus": str(corpus_path),
        "corpus_sha256": file_sha256(corpus_path),
        "direction": f"{data.source}-{data.target}",
        "beam": beam,
        "bleu_tokenize": bleu_tokenize(data.target),
        "references": "single (each pair its own reference)",
        "checkpoint": checkpoint,
        "epoch": ckpt.progress.get("best_epoch"),
        "decode_seconds": round(seconds, 2),
    }
    out = run_dir / f"eval-{name}-beam{beam}.json"
    out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (run_dir / f"eval-{name}-beam{beam}.hyp.txt").write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    result["output"] = str(out)
    return result
