"""Preparing a run here and training it elsewhere: --prepare-only, --tokenizers, a time budget, and
the epochs kept for averaging."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from models.config import ConfigError, load_run_config
from models.train import TrainError, train
from tests.conftest import TINY_CONFIG, cli


def test_a_prepared_run_trains_with_its_own_tokenizers_and_cached_alignments(
    synthetic_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = load_run_config(TINY_CONFIG)
    guided = dataclasses.replace(base, train=dataclasses.replace(base.train, guided_alignment=0.5))
    run = tmp_path / "run"
    prepared = train(guided, run, corpus=synthetic_corpus, threads=1, prepare_only=True)
    assert prepared["aligned"] and not (run / "last.pt").exists()
    tokenizers = {p.name: p.read_bytes() for p in (run / "tokenizers").iterdir()}
    assert list(run.glob("alignments-*.json"))

    # Where it trains there is no aligner: the cached alignments must be found, not recomputed.
    import models.alignments

    def no_aligner(*args: object, **kwargs: object) -> None:
        raise AssertionError("aligned again")

    monkeypatch.setattr(models.alignments, "symmetrised", no_aligner)
    progress = train(
        guided,
        run,
        corpus=synthetic_corpus,
        threads=1,
        train_overrides={"epochs": 1},
        tokenizers_from=run / "tokenizers",
    )
    assert progress["step"] > 0
    assert {p.name: p.read_bytes() for p in (run / "tokenizers").iterdir()} == tokenizers


def test_tokenizers_from_a_folder_without_them_is_refused(synthetic_corpus: Path, tmp_path: Path) -> None:
    with pytest.raises(TrainError, match=r"--tokenizers: no .*en\.model"):
        train(load_run_config(TINY_CONFIG), tmp_path / "run", corpus=synthetic_corpus, tokenizers_from=tmp_path)


@pytest.mark.parametrize("start", ["resume", "init_from"])
def test_tokenizers_with_a_checkpoint_that_brings_its_own_are_refused(
    synthetic_corpus: Path, tmp_path: Path, start: str
) -> None:
    starts = {"resume": {"resume": True}, "init_from": {"init_from": tmp_path / "best.pt"}}[start]
    config = load_run_config(TINY_CONFIG)
    with pytest.raises(TrainError, match=r"--tokenizers cannot be combined with --resume or --init-from"):
        train(config, tmp_path / "run", corpus=synthetic_corpus, tokenizers_from=tmp_path, **starts)


def test_keep_epochs_keeps_the_window_up_to_the_best_and_max_minutes_stops(
    synthetic_corpus: Path, tmp_path: Path
) -> None:
    base = load_run_config(TINY_CONFIG)
    config = dataclasses.replace(base, train=dataclasses.replace(base.train, epochs=4, patience=9, keep_epochs=2))
    run = tmp_path / "run"
    progress = train(config, run, corpus=synthetic_corpus, threads=1)
    kept = sorted(int(p.stem.removeprefix("epoch-")) for p in run.glob("epoch-*.pt"))
    best = progress["best_epoch"]
    assert kept == list(range(max(best - 1, 1), 5))  # from keep_epochs - 1 before the best to the last

    # A budget already spent after the first epoch: one epoch, then stop.
    budget = dataclasses.replace(config, train=dataclasses.replace(config.train, max_minutes=1e-6))
    train(budget, tmp_path / "budget", corpus=synthetic_corpus, threads=1)
    records = (tmp_path / "budget" / "history.jsonl").read_text().splitlines()
    assert len(records) == 1 and json.loads(records[0])["epoch"] == 1


def test_cli_prepare_only_and_a_negative_budget(synthetic_corpus: Path, tmp_path: Path) -> None:
    result = cli("train", TINY_CONFIG, "--out", tmp_path / "run", "--corpus", synthetic_corpus, "--prepare-only")
    assert result.returncode == 0, result.stderr
    assert "prepared" in result.stdout and "--tokenizers" in result.stdout
    result = cli("train", TINY_CONFIG, "--out", tmp_path / "run2", "--corpus", synthetic_corpus, "--max-minutes", "-1")
    assert result.returncode != 0 and "train.max_minutes (-1.0)" in result.stderr
    with pytest.raises(ConfigError, match="keep_epochs"):
        dataclasses.replace(load_run_config(TINY_CONFIG).train, keep_epochs=-1)
