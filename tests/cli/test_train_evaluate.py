"""`attention-mt train` and `evaluate` end to end on the tiny config and the synthetic corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from models.checkpoint import load_checkpoint
from models.config import load_run_config
from models.train import train
from tests.conftest import PROJECT_ROOT, TINY_CONFIG, cli

TINY = TINY_CONFIG
TINY_RNN = PROJECT_ROOT / "models" / "configs" / "tiny-rnn.toml"


def history(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory, synthetic_corpus: Path) -> Path:
    run = tmp_path_factory.mktemp("runs") / "tiny"
    result = cli("train", TINY, "--out", run, "--corpus", synthetic_corpus, "--epochs", "2")
    assert result.returncode == 0, result.stderr
    assert "done: best dev BLEU" in result.stdout
    # not a TTY: plain progress lines with loss, tokens/s and ETA
    assert "loss" in result.stderr and "tok/s" in result.stderr and "eta" in result.stderr
    return run


def test_train_writes_a_run(tiny_run: Path) -> None:
    for name in (
        "best.pt",
        "last.pt",
        "config.json",
        "history.jsonl",
        "tokenizers/en.model",
        "tokenizers/zh.model",
    ):
        assert (tiny_run / name).is_file(), name
    records = history(tiny_run)
    assert [r["epoch"] for r in records] == [1, 2]
    assert all("dev_bleu" in r and "dev_chrf" in r and r["tokens_per_second"] > 0 for r in records)


def test_resume_continues_the_run(tiny_run: Path, synthetic_corpus: Path) -> None:
    steps_before = load_checkpoint(tiny_run / "last.pt").progress["step"]
    refused = cli("train", TINY, "--out", tiny_run, "--corpus", synthetic_corpus)
    assert refused.returncode == 2 and "--resume" in refused.stderr
    resumed = cli("train", TINY, "--out", tiny_run, "--corpus", synthetic_corpus, "--resume", "--epochs", "3")
    assert resumed.returncode == 0, resumed.stderr
    assert [r["epoch"] for r in history(tiny_run)] == [1, 2, 3]
    assert load_checkpoint(tiny_run / "last.pt").progress["step"] > steps_before


@pytest.mark.parametrize(("split", "beam"), [("test", "2"), ("dev", "1")])
def test_evaluate_prints_and_writes_scores(
    tiny_run: Path, synthetic_corpus: Path, split: str, beam: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATTENTION_MT_REAL_TEXT", str(synthetic_corpus))  # the real-text set, stood in for
    result = cli("evaluate", tiny_run, "--split", split, "--beam", beam)
    assert result.returncode == 0, result.stderr
    scores = json.loads(result.stdout)
    assert {"beam", "bleu_tokenize", "direction", "sets", "no_repeat_ngram"} <= set(scores)
    assert set(scores["sets"]) == {f"tatoeba-{split}", f"news-{split}"}
    for figures in scores["sets"].values():
        assert {"bleu", "chrf", "loop_rate", "sentences", "corpus_sha256"} <= set(figures)
        assert figures["sentences"] > 0 and 0.0 <= figures["loop_rate"] <= 1.0
    assert scores["bleu_tokenize"] == "zh"
    assert json.loads(Path(scores["output"]).read_text()) | {"output": scores["output"]} == scores


def test_evaluate_a_corpus_file_or_a_bundle(tiny_run: Path, synthetic_corpus: Path, bundle_dir: Path) -> None:
    result = cli("evaluate", tiny_run, "--corpus", synthetic_corpus, "--beam", "1", "--limit", "40")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["sets"]["synthetic"]["sentences"] == 40
    bundle = cli("evaluate", bundle_dir / "en-zh", "--corpus", synthetic_corpus, "--beam", "1", "--limit", "40")
    assert bundle.returncode == 0, bundle.stderr
    scores = json.loads(bundle.stdout)
    assert scores["bundle"] == "en-zh" and "output" not in scores  # nothing is written into a bundle
    assert scores["sets"]["synthetic"]["sentences"] == 40


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    missing = cli("evaluate", tmp_path / "nothing")
    assert missing.returncode == 2 and "train first" in missing.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('[model]\nfamily = "transformer"\nlayers = 2\n')
    result = cli("train", bad, "--out", tmp_path / "run")
    assert result.returncode == 2 and "unknown key(s) in [model]: layers" in result.stderr


def test_rnn_config_trains(tmp_path: Path, synthetic_corpus: Path) -> None:
    result = cli("train", TINY_RNN, "--out", tmp_path / "rnn", "--corpus", synthetic_corpus, "--epochs", "1")
    assert result.returncode == 0, result.stderr
    assert load_checkpoint(tmp_path / "rnn" / "best.pt").config.model.family == "rnn"


def test_resume_mid_epoch_gives_the_same_weights(tmp_path: Path, synthetic_corpus: Path) -> None:
    config = load_run_config(TINY)
    train(config, tmp_path / "straight", corpus=synthetic_corpus, train_overrides={"epochs": 2})
    train(config, tmp_path / "stopped", corpus=synthetic_corpus, train_overrides={"epochs": 2, "max_steps": 20})
    assert load_checkpoint(tmp_path / "stopped" / "last.pt").progress["batch_in_epoch"] > 0  # stopped mid-epoch
    train(config, tmp_path / "stopped", resume=True, corpus=synthetic_corpus, train_overrides={"max_steps": 0})
    straight = load_checkpoint(tmp_path / "straight" / "last.pt").model.state_dict()
    resumed = load_checkpoint(tmp_path / "stopped" / "last.pt").model.state_dict()
    for name, tensor in straight.items():
        torch.testing.assert_close(resumed[name], tensor, atol=1e-6, rtol=0, msg=name)


def test_init_from_fine_tunes_a_trained_checkpoint(
    trained_tiny_run: Path, synthetic_corpus: Path, tmp_path: Path
) -> None:
    """--init-from starts from the checkpoint's weights and tokenizers (not from scratch), with the
    new config's [train] and [data] settings and a fresh optimizer."""
    start = load_checkpoint(trained_tiny_run / "best.pt")
    run = tmp_path / "tuned"
    result = cli(
        "train",
        TINY,
        "--out",
        run,
        "--corpus",
        synthetic_corpus,
        "--init-from",
        trained_tiny_run / "best.pt",
        "--max-steps",
        "1",
        "--threads",
        "1",
    )
    assert result.returncode == 0, result.stderr
    tuned = load_checkpoint(run / "last.pt")
    assert tuned.src_tokenizer.model_proto == start.src_tokenizer.model_proto
    # one small step away from the trained weights, far from a fresh initialisation
    before, after = start.model.state_dict(), tuned.model.state_dict()
    drift = max(float((before[k] - after[k]).abs().max()) for k in before)
    assert drift < 0.05
    # a trained start is already good on dev after one step: a fresh model would score ~0
    assert history(run)[0]["dev_bleu"] > 10


def test_init_from_a_missing_checkpoint_is_one_line(tmp_path: Path, synthetic_corpus: Path) -> None:
    result = cli("train", TINY, "--out", tmp_path / "r", "--corpus", synthetic_corpus, "--init-from", tmp_path / "x.pt")
    assert result.returncode != 0
    assert "nothing to fine-tune from" in result.stderr and "Traceback" not in result.stderr
