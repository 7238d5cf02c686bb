"""`attention-mt train`: tokenizers, model, and the training loop with checkpoints and early stop.

The loop: label-smoothed cross-entropy, AdamW with linear warm-up then inverse-sqrt decay,
gradient clipping, a fixed seed, dev BLEU after every epoch (best checkpoint kept), early stop
after `patience` epochs without improvement, and exact resume from `last.pt`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import random
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from models.alignments import Link, align
from models.augment import augment_names
from models.batching import make_batches, pad
from models.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from models.config import RunConfig, TrainConfig, TransformerConfig
from models.data import (
    Pair,
    default_corpus_path,
    default_real_text_path,
    file_sha256,
    read_corpus,
    split_corpus,
    split_real_text,
)
from models.decoding import translate_texts
from models.guided import alignment_targets, guided_loss
from models.metrics import score
from models.progress import Progress
from models.registry import Seq2Seq, build_model, count_parameters
from models.vocab import train_tokenizer
from service.engine.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer


class TrainError(RuntimeError):
    """A run that cannot start or continue as asked."""


@dataclass
class TrainData:
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    src_ids: list[list[int]]  # with EOS
    tgt_ids: list[list[int]]  # with EOS
    dev: list[Pair]
    corpus: Path
    corpus_sha256: str  # with real text: of both files together
    dropped: int  # training pairs over the length limits
    links: list[list[Link]] | None = None  # per training pair, for guided alignment


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _training_pairs(config: RunConfig, corpus: Path) -> tuple[list[Pair], list[Pair], str]:
    """(train, dev, data hash): Tatoeba's train split, name-augmented, and the real-text train
    split and synthetic pairs when asked; dev stays Tatoeba's (the real-text dev split chooses
    search settings)."""
    data = config.data
    splits = split_corpus(read_corpus(corpus))
    train = splits["train"] + augment_names(splits["train"], data.name_augmentation, config.train.seed)
    digest = file_sha256(corpus)
    held_out = splits["dev"] + splits["test"]
    if data.real_text:
        real_path = default_real_text_path()
        real = split_real_text(read_corpus(real_path))
        train += real["train"]
        held_out += real["dev"] + real["test"]
        digest = hashlib.sha256(f"{digest}+{file_sha256(real_path)}".encode()).hexdigest()
    if data.synthetic:
        train += held_apart(read_corpus(data.synthetic), held_out)
        digest = hashlib.sha256(f"{digest}+{file_sha256(data.synthetic)}".encode()).hexdigest()
    return train, splits["dev"], digest


def held_apart(synthetic: list[Pair], held_out: list[Pair]) -> list[Pair]:
    """Synthetic pairs that share no sentence with a held-out pair: whatever made them, dev and
    test sentences stay unseen."""
    seen = {p.en for p in held_out} | {p.zh for p in held_out}
    return [p for p in synthetic if p.en not in seen and p.zh not in seen]


def prepare_data(
    config: RunConfig, corpus: Path, tokenizers: tuple[Tokenizer, Tokenizer] | None, cache_dir: Path | None = None
) -> TrainData:
    """Read and split the corpus, train (or reuse) tokenizers, encode and filter the training
    split, and align it when the run is guided."""
    data = config.data
    train, dev, digest = _training_pairs(config, corpus)
    if tokenizers is None and data.joint_vocab:
        # Chinese's character coverage: the joint model must keep nearly all Chinese characters.
        joint = train_tokenizer([p.en for p in train] + [p.zh for p in train], "zh", data.src_vocab_size)
        tokenizers = (joint, joint)
    if tokenizers is None:
        tokenizers = (
            train_tokenizer([p.text(data.source) for p in train], data.source, data.src_vocab_size),
            train_tokenizer([p.text(data.target) for p in train], data.target, data.tgt_vocab_size),
        )
    src_tok, tgt_tok = tokenizers
    src_all = [[*ids, EOS_ID] for ids in src_tok.encode_ids([p.text(data.source) for p in train])]
    tgt_all = [[*ids, EOS_ID] for ids in tgt_tok.encode_ids([p.text(data.target) for p in train])]
    keep = [
        i
        for i in range(len(train))
        if len(src_all[i]) <= data.max_src_tokens and len(tgt_all[i]) <= data.max_tgt_tokens
    ]
    src_ids, tgt_ids = [src_all[i] for i in keep], [tgt_all[i] for i in keep]
    links = None
    if config.train.guided_alignment > 0:
        started = time.perf_counter()
        links = align(src_ids, tgt_ids, cache_dir)
        log(f"aligned {len(links):,} training pairs in {time.perf_counter() - started:.0f} s")
    return TrainData(
        src_tokenizer=src_tok,
        tgt_tokenizer=tgt_tok,
        src_ids=src_ids,
        tgt_ids=tgt_ids,
        dev=dev,
        corpus=corpus.resolve(),
        corpus_sha256=digest,
        dropped=len(train) - len(keep),
        links=links,
    )


def epoch_checkpoint(out_dir: Path, epoch: int) -> Path:
    """Where `train.keep_epochs` keeps an epoch's weights."""
    return out_dir / f"epoch-{epoch:03d}.pt"


def kept_window(out_dir: Path, best_epoch: int, size: int) -> list[Path]:
    """The kept epochs among the `size` ending at `best_epoch`: what averaging takes."""
    paths = [epoch_checkpoint(out_dir, e) for e in range(best_epoch - size + 1, best_epoch + 1)]
    return [p for p in paths if p.is_file()]


def lr_at(step: int, base_lr: float, warmup: int, decay: str = "inverse_sqrt", total: int = 0) -> float:
    """Linear warm-up to base_lr, then decay with the inverse square root of the step, or linearly
    to zero at step `total`."""
    step, warmup = max(step, 1), max(warmup, 1)
    if step < warmup:
        return base_lr * step / warmup
    if decay == "linear":
        return base_lr * max(total - step, 0) / max(total - warmup, 1)
    return base_lr * math.sqrt(warmup / step)


def dev_subset(dev: list[Pair], n: int) -> list[Pair]:
    """Every k-th dev pair, so a partial dev set still spans the whole split."""
    if n <= 0 or n >= len(dev):
        return dev
    stride = len(dev) / n
    return [dev[int(i * stride)] for i in range(n)]


def dev_bleu(model: Seq2Seq, config: RunConfig, data: TrainData) -> dict[str, float]:
    pairs = dev_subset(data.dev, config.train.dev_sentences)
    if not pairs:
        return {"bleu": 0.0, "chrf": 0.0}
    model.eval()
    hyps = translate_texts(
        model,
        data.src_tokenizer,
        data.tgt_tokenizer,
        [p.text(config.data.source) for p in pairs],
        config.data.max_src_tokens,
        config.data.max_tgt_tokens,
        source_lang=config.data.source,
    )
    return score(hyps, [p.text(config.data.target) for p in pairs], config.data.target)


def _loss(
    model: nn.Module, src: list[list[int]], tgt: list[list[int]], cfg: TrainConfig, links: list[list[Link]] | None
) -> tuple[torch.Tensor, int]:
    """Label-smoothed cross-entropy, plus the guided-alignment term when `links` are given."""
    src_ids, src_mask = pad(src)  # (B, S)
    tgt_ids, _ = pad([[BOS_ID, *t] for t in tgt])  # (B, T+1)
    device = next(model.parameters()).device
    src_ids, src_mask, tgt_ids = src_ids.to(device), src_mask.to(device), tgt_ids.to(device)
    out = model(src_ids, src_mask, tgt_ids[:, :-1])
    target = tgt_ids[:, 1:]  # (B, T)
    loss = F.cross_entropy(out.logits.transpose(1, 2), target, ignore_index=PAD_ID, label_smoothing=cfg.label_smoothing)
    if links is not None:
        guide = alignment_targets(links, src_ids.shape[1], target.shape[1]).to(device)  # (B, T, S)
        loss = loss + cfg.guided_alignment * guided_loss(out.cross_attention, guide, cfg.guided_layer, cfg.guided_head)
    return loss, int(target.ne(PAD_ID).sum()) + int((~src_mask).sum())


class Trainer:
    """Owns the model, optimizer and progress of one run directory."""

    def __init__(self, config: RunConfig, out_dir: Path, data: TrainData, resume_from: Checkpoint | None):
        self.config, self.out_dir, self.data = config, out_dir, data
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        torch.manual_seed(config.train.seed)
        self.model = build_model(config.model).to(self.device)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=config.train.lr,
            betas=(0.9, 0.98),
            weight_decay=config.train.weight_decay,
        )
        self.progress: dict[str, Any] = {
            "epoch": 1,
            "batch_in_epoch": 0,
            "step": 0,
            "best_dev_bleu": -1.0,
            "best_epoch": 0,
            "bad_epochs": 0,
            "history": [],
            "corpus": str(data.corpus),
            "corpus_sha256": data.corpus_sha256,
            "train_seconds": 0.0,
        }
        if resume_from is not None:
            self._restore(resume_from)

    def _restore(self, ckpt: Checkpoint) -> None:
        if ckpt.training_state is None:
            raise TrainError("last.pt has no training state to resume from")
        if ckpt.progress.get("corpus_sha256") != self.data.corpus_sha256:
            raise TrainError("the corpus changed since this run started; start a new run directory")
        self.model.load_state_dict(ckpt.model.state_dict())
        self.optimizer.load_state_dict(ckpt.training_state["optimizer"])
        torch.set_rng_state(ckpt.training_state["torch_rng"])
        self.progress = dict(ckpt.progress)

    def checkpoint(self, name: str, with_training_state: bool) -> None:
        training_state = (
            {"optimizer": self.optimizer.state_dict(), "torch_rng": torch.get_rng_state()}
            if with_training_state
            else None
        )
        ckpt = Checkpoint(
            self.config,
            self.model,
            self.data.src_tokenizer,
            self.data.tgt_tokenizer,
            dict(self.progress),
            training_state,
        )
        save_checkpoint(self.out_dir / name, ckpt)

    def run_epoch(self, epoch: int, max_steps: int) -> tuple[float, bool]:
        """Train one epoch from `batch_in_epoch`; returns (tokens/s, whether the epoch is complete)."""
        cfg = self.config.train
        lengths = [(len(s), len(t)) for s, t in zip(self.data.src_ids, self.data.tgt_ids, strict=True)]
        batches = make_batches(lengths, cfg.batch_tokens, seed=cfg.seed + epoch)
        progress = Progress(epoch, len(batches), self.progress["batch_in_epoch"], cfg.log_every)
        total_steps = min(cfg.max_steps, cfg.epochs * len(batches)) if cfg.max_steps else cfg.epochs * len(batches)
        self.model.train()
        started = time.perf_counter()
        for b in range(self.progress["batch_in_epoch"], len(batches)):
            if max_steps and self.progress["step"] >= max_steps:
                break
            lr = lr_at(self.progress["step"] + 1, cfg.lr, cfg.warmup_steps, cfg.decay, total_steps)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            batch = batches[b]
            links = self.data.links
            loss, tokens = _loss(
                self.model,
                [self.data.src_ids[i] for i in batch],
                [self.data.tgt_ids[i] for i in batch],
                cfg,
                [links[i] for i in batch] if links is not None else None,
            )
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip_norm)
            self.optimizer.step()
            self.progress["step"] += 1
            self.progress["batch_in_epoch"] = b + 1
            progress.update(loss.item(), tokens, lr)
            if self.progress["step"] % cfg.checkpoint_every == 0:
                self._add_time(started)
                started = time.perf_counter()
                self.checkpoint("last.pt", with_training_state=True)
        progress.close()
        self._add_time(started)
        return progress.tokens_per_second, self.progress["batch_in_epoch"] == len(batches)

    def _add_time(self, started: float) -> None:
        self.progress["train_seconds"] += time.perf_counter() - started

    def end_epoch(self, epoch: int, tokens_per_second: float, complete: bool) -> bool:
        """Evaluate on dev, keep the best checkpoint; True when training should stop early."""
        scores = dev_bleu(self.model, self.config, self.data)
        record = {
            "epoch": epoch,
            "step": self.progress["step"],
            "tokens_per_second": round(tokens_per_second),
            "complete": complete,
            **{f"dev_{k}": v for k, v in scores.items()},
        }
        self.progress["history"].append(record)
        improved = scores["bleu"] > self.progress["best_dev_bleu"]
        if improved:
            self.progress.update(best_dev_bleu=scores["bleu"], best_epoch=epoch, bad_epochs=0)
        else:
            self.progress["bad_epochs"] += 1
        if complete:
            self.progress.update(epoch=epoch + 1, batch_in_epoch=0)
        with (self.out_dir / "history.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        log(
            f"epoch {epoch}: dev BLEU {scores['bleu']:.2f} chrF {scores['chrf']:.2f} "
            f"(best {self.progress['best_dev_bleu']:.2f} at epoch {self.progress['best_epoch']})"
        )
        if improved:
            self.checkpoint("best.pt", with_training_state=False)
        self._keep_epoch(epoch)
        self.checkpoint("last.pt", with_training_state=True)
        return bool(self.progress["bad_epochs"] >= self.config.train.patience)

    def _keep_epoch(self, epoch: int) -> None:
        """Keep this epoch's weights; drop those more than keep_epochs - 1 epochs before the best."""
        keep = self.config.train.keep_epochs
        if keep == 0:
            return
        self.checkpoint(epoch_checkpoint(self.out_dir, epoch).name, with_training_state=False)
        oldest = self.progress["best_epoch"] - keep + 1
        for path in self.out_dir.glob("epoch-*.pt"):
            if int(path.stem.removeprefix("epoch-")) < oldest:
                path.unlink()

    def fit(self, max_steps: int) -> dict[str, Any]:
        cfg = self.config.train
        log(
            f"model: {self.config.model.family}, {count_parameters(self.model):,} parameters on {self.device}; "
            f"{len(self.data.src_ids):,} training pairs ({self.data.dropped} over the length limits dropped)"
        )
        started = time.monotonic()
        while self.progress["epoch"] <= cfg.epochs:
            epoch = self.progress["epoch"]
            tokens_per_second, complete = self.run_epoch(epoch, max_steps)
            stop = self.end_epoch(epoch, tokens_per_second, complete)
            if stop:
                log(f"early stop: no better dev BLEU for {cfg.patience} epochs")
                break
            if max_steps and self.progress["step"] >= max_steps:
                log(f"reached max_steps={max_steps}")
                break
            if cfg.max_minutes and time.monotonic() - started >= cfg.max_minutes * 60:
                log(f"reached max_minutes={cfg.max_minutes:g} after epoch {epoch}")
                break
        return self.progress


def train(
    config: RunConfig,
    out_dir: Path,
    resume: bool = False,
    corpus: Path | None = None,
    train_overrides: dict[str, Any] | None = None,
    init_from: Path | None = None,
    threads: int | None = None,
    tokenizers_from: Path | None = None,
    prepare_only: bool = False,
) -> dict[str, Any]:
    """Train a run in `out_dir` (config.json, tokenizers/, best.pt, last.pt, history.jsonl).

    `train_overrides` replace [train] settings (e.g. epochs, max_steps), also on resume.
    `init_from` fine-tunes: a checkpoint's weights, model config and tokenizers start the run, with
    a fresh optimizer and the [data]/[train] settings of `config` (e.g. name augmentation added).
    `tokenizers_from` starts with a run's tokenizers/ instead of training new ones, and
    `prepare_only` stops once the tokenizers and alignments are written: prepare here, train on a
    lent GPU (which needs no aligner when the alignments are cached in the run directory)."""
    if tokenizers_from is not None and (resume or init_from is not None):
        # both bring their own tokenizers, which the checkpoint's weights were trained with
        raise TrainError("--tokenizers cannot be combined with --resume or --init-from (they bring their own)")
    torch.set_num_threads(threads or os.cpu_count() or 1)
    if isinstance(config.model, TransformerConfig):
        longest = max(config.data.max_src_tokens, config.data.max_tgt_tokens)
        if config.model.max_positions < longest:
            raise TrainError(f"model.max_positions ({config.model.max_positions}) < the longest sequence ({longest})")
    corpus = Path(corpus or config.data.corpus or default_corpus_path())
    resume_from = _resumed(out_dir) if resume else None
    if resume_from is None and (out_dir / "last.pt").exists():
        raise TrainError(f"{out_dir} already holds a run; pass --resume to continue it or choose another --out")
    if resume_from is not None:
        config = resume_from.config
    if train_overrides:
        config = dataclasses.replace(config, train=dataclasses.replace(config.train, **train_overrides))
    start = resume_from
    if init_from is not None and resume_from is None:
        start = _fine_tune_start(init_from, config)
        config = dataclasses.replace(config, model=start.config.model)
    tokenizers = (start.src_tokenizer, start.tgt_tokenizer) if start else None
    if tokenizers_from is not None:
        tokenizers = _read_tokenizers(tokenizers_from, config)
    random.seed(config.train.seed)
    _check_guide(config)
    data = prepare_data(config, corpus, tokenizers, out_dir)
    config = dataclasses.replace(
        config,
        model=dataclasses.replace(
            config.model, src_vocab=data.src_tokenizer.vocab_size, tgt_vocab=data.tgt_tokenizer.vocab_size
        ),
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_run_files(out_dir, config, data)
    if prepare_only:
        return {"prepared": str(out_dir), "pairs": len(data.src_ids), "aligned": data.links is not None}
    trainer = Trainer(config, out_dir, data, resume_from)
    if start is not None and resume_from is None:
        trainer.model.load_state_dict(start.model.state_dict())
    return trainer.fit(config.train.max_steps)


def _resumed(out_dir: Path) -> Checkpoint:
    last = out_dir / "last.pt"
    if not last.is_file():
        raise TrainError(f"nothing to resume: {last} does not exist")
    return load_checkpoint(last)


def _fine_tune_start(init_from: Path, config: RunConfig) -> Checkpoint:
    if not Path(init_from).is_file():
        raise TrainError(f"nothing to fine-tune from: {init_from} does not exist")
    start = load_checkpoint(init_from)
    if (start.config.data.source, start.config.data.target) != (config.data.source, config.data.target):
        raise TrainError(f"{init_from} translates {start.config.data.source}->{start.config.data.target}")
    return start


def _read_tokenizers(folder: Path, config: RunConfig) -> tuple[Tokenizer, Tokenizer]:
    """A run's tokenizers/ folder: <source>.model and <target>.model."""
    paths = [Path(folder) / f"{lang}.model" for lang in (config.data.source, config.data.target)]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise TrainError(f"--tokenizers: no {', '.join(missing)}")
    return Tokenizer(paths[0].read_bytes()), Tokenizer(paths[1].read_bytes())


def _check_guide(config: RunConfig) -> None:
    """A guided run names a layer and head the model has."""
    cfg, model = config.train, config.model
    if cfg.guided_alignment < 0:
        raise TrainError(f"train.guided_alignment is {cfg.guided_alignment}; it must be >= 0")
    if cfg.guided_alignment == 0:
        return
    layers, heads = (model.dec_layers, model.heads) if isinstance(model, TransformerConfig) else (1, 1)
    if not -layers <= cfg.guided_layer < layers or not 0 <= cfg.guided_head < heads:
        raise TrainError(
            f"train.guided_layer {cfg.guided_layer} / guided_head {cfg.guided_head}: "
            f"the model has {layers} decoder layer(s) of {heads} head(s)"
        )


def _write_run_files(out_dir: Path, config: RunConfig, data: TrainData) -> None:
    (out_dir / "config.json").write_text(json.dumps(config.to_dict(), indent=2) + "\n", encoding="utf-8")
    tok_dir = out_dir / "tokenizers"
    if tok_dir.exists():
        shutil.rmtree(tok_dir)
    tok_dir.mkdir()
    (tok_dir / f"{config.data.source}.model").write_bytes(data.src_tokenizer.model_proto)
    (tok_dir / f"{config.data.target}.model").write_bytes(data.tgt_tokenizer.model_proto)
