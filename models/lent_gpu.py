"""Runs trained side by side on a lent GPU (models/lent_gpu.sh), then scored and packed there.

    python -m models.lent_gpu train RUN MINUTES THREADS   # a run prepared here with --prepare-only
    python -m models.lent_gpu score RUN                    # average the epochs up to the best; dev BLEU
    python -m models.lent_gpu pack OUT RUN...              # per direction, the best checkpoint, in parts
    python -m models.lent_gpu unpack DIR LABEL OUT.pt      # here, afterwards

RUN names a config, models/configs/transformer-RUN.toml, and a run directory, .gpu/runs/RUN.
Scores are greedy, on both dev sets (Tatoeba and real text): the test splits stay for the bundle.
Decoding is models.decoding's, not models.evaluate's: that one reads bundles through the service's
manifest (pydantic), which the lent machine's image lacks.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from models.average import average_checkpoints
from models.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from models.config import load_run_config
from models.data import Pair, default_corpus_path, default_real_text_path, read_corpus, split_corpus, split_real_text
from models.decoding import translate_texts
from models.metrics import loop_rate, score
from models.packing import pack, unpack
from models.train import kept_window, train

RUNS = Path(".gpu/runs")


def _train(run: str, minutes: float, threads: int) -> None:
    out = RUNS / run
    config = load_run_config(Path("models/configs") / f"transformer-{run}.toml")
    progress = train(
        config, out, train_overrides={"max_minutes": minutes}, threads=threads, tokenizers_from=out / "tokenizers"
    )
    print(f"done: best dev BLEU {progress['best_dev_bleu']:.2f} at epoch {progress['best_epoch']}")


def _dev_sets() -> dict[str, list[Pair]]:
    return {
        "tatoeba": split_corpus(read_corpus(default_corpus_path()))["dev"],
        "news": split_real_text(read_corpus(default_real_text_path()))["dev"],
    }


def _scores(ckpt: Checkpoint, sets: dict[str, list[Pair]]) -> dict[str, dict[str, float]]:
    model = ckpt.model.to("cuda" if torch.cuda.is_available() else "cpu").eval()
    data, out = ckpt.config.data, {}
    for name, pairs in sets.items():
        hyps = translate_texts(
            model, ckpt.src_tokenizer, ckpt.tgt_tokenizer, [p.text(data.source) for p in pairs],
            data.max_src_tokens, data.max_tgt_tokens, 1, source_lang=data.source, no_repeat_ngram=3,
        )  # fmt: skip
        out[name] = {**score(hyps, [p.text(data.target) for p in pairs], data.target), "loops": loop_rate(hyps)}
    ckpt.model.to("cpu")
    return out


def _score(run: str) -> None:
    """finish.json: dev scores of best.pt and of the mean of the kept epochs up to the best (the
    run's keep_epochs of them)."""
    path = RUNS / run
    best = load_checkpoint(path / "best.pt")
    best_epoch = int(best.progress["best_epoch"])
    epochs = kept_window(path, best_epoch, best.config.train.keep_epochs)
    entry: dict[str, Any] = {
        "best_epoch": best_epoch,
        "steps": best.progress["step"],
        "train_seconds": round(best.progress["train_seconds"]),
        "averaged": [p.name for p in epochs],
    }
    sets = _dev_sets()
    entry["best"] = _scores(best, sets)
    if len(epochs) > 1:
        average = average_checkpoints(epochs)
        save_checkpoint(path / "average.pt", average)
        entry["average"] = _scores(average, sets)
    (path / "finish.json").write_text(json.dumps(entry, indent=2) + "\n", encoding="utf-8")
    print(run, json.dumps(entry), flush=True)


def _pack(out: Path, runs: list[str]) -> None:
    """Per direction, the checkpoint with the highest dev BLEU summed over both sets."""
    report: dict[str, Any] = {}
    chosen: dict[str, tuple[float, str, Path]] = {}
    for run in runs:
        finished = RUNS / run / "finish.json"
        entry: dict[str, Any] = (
            json.loads(finished.read_text(encoding="utf-8")) if finished.is_file() else {"error": "no finish.json"}
        )
        report[run] = entry
        data = json.loads((RUNS / run / "config.json").read_text(encoding="utf-8"))["data"]
        direction = f"{data['source']}-{data['target']}"
        for pick in ("best", "average"):
            if pick not in entry:
                continue
            total = sum(s["bleu"] for s in entry[pick].values())
            if direction not in chosen or total > chosen[direction][0]:
                chosen[direction] = (total, f"{run}.{pick}", RUNS / run / f"{pick}.pt")
    report["packed"] = {}
    for direction, (total, label, file) in chosen.items():
        parts = [p.name for p in pack(load_checkpoint(file), out, label)]
        report["packed"][direction] = {"run": label, "dev_bleu_sum": total, "parts": parts}
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report["packed"], indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train")
    t.add_argument("run")
    t.add_argument("minutes", type=float)
    t.add_argument("threads", type=int)
    sub.add_parser("score").add_argument("run")
    p = sub.add_parser("pack")
    p.add_argument("out", type=Path)
    p.add_argument("runs", nargs="+")
    u = sub.add_parser("unpack")
    u.add_argument("folder", type=Path)
    u.add_argument("label")
    u.add_argument("checkpoint", type=Path)
    args = parser.parse_args()
    if args.command == "train":
        _train(args.run, args.minutes, args.threads)
    elif args.command == "score":
        _score(args.run)
    elif args.command == "pack":
        _pack(args.out, args.runs)
    else:
        save_checkpoint(args.checkpoint, unpack(args.folder, args.label))
        print(f"{args.checkpoint}: from {args.folder}/{args.label}.part*")


if __name__ == "__main__":
    main()
