from __future__ import annotations

from pathlib import Path

import pytest

from models.config import ConfigError, RNNConfig, TransformerConfig, load_run_config, run_config_from_dict
from models.train import lr_at

CONFIG_DIR = Path(__file__).resolve().parents[2] / "models" / "configs"


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.toml")), ids=lambda p: p.stem)
def test_shipped_configs_load(path: Path) -> None:
    config = load_run_config(path)
    assert config.model.family in ("rnn", "transformer")


def test_the_shipped_set() -> None:
    names = {p.stem for p in CONFIG_DIR.glob("*.toml")}
    assert {"transformer-en-zh", "transformer-zh-en", "rnn-en-zh", "tiny"} <= names
    rnn = load_run_config(CONFIG_DIR / "rnn-en-zh.toml").model
    assert isinstance(rnn, RNNConfig) and rnn.attention == "additive"
    zh_en = load_run_config(CONFIG_DIR / "transformer-zh-en.toml")
    assert (zh_en.data.source, zh_en.data.target) == ("zh", "en")


def test_unknown_keys_are_named() -> None:
    with pytest.raises(ConfigError, match=r"unknown key\(s\) in \[model\]: layers"):
        run_config_from_dict({"model": {"family": "transformer", "layers": 3}})
    with pytest.raises(ConfigError, match=r"unknown table\(s\): trian"):
        run_config_from_dict({"model": {"family": "rnn"}, "trian": {}})


def test_invalid_values_are_explained() -> None:
    with pytest.raises(ConfigError, match="choose one of"):
        run_config_from_dict({"model": {"family": "lstm"}})
    with pytest.raises(ConfigError, match=r"dec_hidden \(100\) must equal 2 \* enc_hidden \(128\)"):
        RNNConfig(attention="dot", enc_hidden=64, dec_hidden=100)
    with pytest.raises(ConfigError, match="divisible"):
        TransformerConfig(d_model=30, heads=4)
    with pytest.raises(ConfigError, match=r"model\.query is 'next'; choose previous or current"):
        RNNConfig(query="next")
    with pytest.raises(ConfigError, match=r"model\.init is 'last'; choose mean or zero"):
        RNNConfig(init="last")
    with pytest.raises(ConfigError, match="en and zh"):
        run_config_from_dict({"model": {"family": "rnn"}, "data": {"source": "en", "target": "en"}})


def test_config_round_trips_through_a_dict() -> None:
    config = load_run_config(CONFIG_DIR / "transformer-en-zh.toml")
    assert run_config_from_dict(config.to_dict()) == config


def test_the_learning_rate_decays_by_inverse_sqrt_or_linearly_to_zero() -> None:
    assert [lr_at(s, 1e-3, 400) for s in (200, 400, 1600)] == pytest.approx([5e-4, 1e-3, 5e-4])
    linear = [lr_at(s, 1e-4, 50, "linear", 550) for s in (25, 50, 300, 550, 600)]
    assert linear == pytest.approx([5e-5, 1e-4, 5e-5, 0.0, 0.0])
    with pytest.raises(ConfigError, match=r"train\.decay is 'cosine'; it must be one of inverse_sqrt, linear"):
        run_config_from_dict({"model": {"family": "rnn"}, "train": {"decay": "cosine"}})
