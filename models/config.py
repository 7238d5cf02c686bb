"""Frozen configuration of a run: model hyperparameters, data and training settings.

A run is described by one TOML file with `[model]`, `[data]` and `[train]` tables. The
dataclasses are saved inside every checkpoint, so a checkpoint rebuilds its model alone.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

SCORE_FUNCTIONS = ("dot", "scaled_dot", "cosine", "general", "additive")
LANGUAGES = ("en", "zh")


class ConfigError(ValueError):
    """A config file or dict that does not describe a valid run."""


@dataclass(frozen=True)
class RNNConfig:
    """Bidirectional GRU encoder, GRU decoder, one attention with a selectable score."""

    family: Literal["rnn"] = "rnn"
    src_vocab: int = 0  # filled from the tokenizer at training time
    tgt_vocab: int = 0
    emb_dim: int = 256
    enc_hidden: int = 256  # per direction: memory has 2 * enc_hidden features
    enc_layers: int = 1
    dec_hidden: int = 512
    attention: str = "additive"
    attn_dim: int = 256  # additive attention's hidden size
    dropout: float = 0.2
    # Which decoder state asks the attention question at step i: "previous" = s_{i-1}, with the
    # context fed into the GRU (Bahdanau et al. 2015); "current" = s_i after the GRU has read
    # y_{i-1}, the context going only to the output (Luong et al. 2015). The second trains
    # faster (the decoder GRU runs over the whole target at once) and aligns with the word it emits.
    query: str = "previous"
    # The decoder's first state: "mean" = tanh(W mean_j h_j), a summary of the source; "zero" = 0,
    # so even the first word's evidence must come through the attention (and shows in it).
    init: str = "mean"

    def __post_init__(self) -> None:
        if self.query not in ("previous", "current"):
            raise ConfigError(f"model.query is {self.query!r}; choose previous or current")
        if self.init not in ("mean", "zero"):
            raise ConfigError(f"model.init is {self.init!r}; choose mean or zero")
        if self.attention not in SCORE_FUNCTIONS:
            raise ConfigError(f"model.attention is {self.attention!r}; choose one of {SCORE_FUNCTIONS}")
        if self.attention in ("dot", "scaled_dot", "cosine") and self.dec_hidden != 2 * self.enc_hidden:
            raise ConfigError(
                f"model.attention={self.attention!r} compares the decoder state with encoder states "
                f"directly, so dec_hidden ({self.dec_hidden}) must equal 2 * enc_hidden ({2 * self.enc_hidden})"
            )


NORMS = ("pre", "post")
ACTIVATIONS = ("relu", "gelu", "swish")
POSITION_LAYOUTS = ("interleaved", "halves")


@dataclass(frozen=True)
class TransformerConfig:
    """Encoder-decoder Transformer with multi-head scaled dot-product attention.

    The defaults are this project's own models (pre-norm, ReLU, tied output). The other options
    describe converted Marian / OPUS-MT checkpoints (export/marian_weights.py): post-norm with no
    final layer norms, swish or GELU, sine and cosine positions in two halves, an optional
    embedding scale, one embedding shared by source and target, and a bias on the logits.
    """

    family: Literal["transformer"] = "transformer"
    src_vocab: int = 0
    tgt_vocab: int = 0
    d_model: int = 256
    heads: int = 4
    ff_dim: int = 1024
    enc_layers: int = 3
    dec_layers: int = 3
    dropout: float = 0.1
    attn_dropout: float = 0.0
    max_positions: int = 256
    tie_output: bool = True  # share the target embedding with the output projection
    norm: str = "pre"  # pre: layer norm before each sublayer, and a final one; post: after each residual
    activation: str = "relu"  # of the feed-forward layers: relu, gelu (exact) or swish (SiLU)
    positions: str = "interleaved"  # sinusoids: sin/cos interleaved; "halves": all sines, then all cosines
    scale_embedding: bool = True  # multiply embeddings by sqrt(d_model)
    share_embeddings: bool = False  # one embedding table for source and target (a shared vocabulary)
    logits_bias: bool = False  # a bias added to the output logits

    def __post_init__(self) -> None:
        if self.d_model % self.heads:
            raise ConfigError(f"model.d_model ({self.d_model}) must be divisible by model.heads ({self.heads})")
        for name, value, allowed in (
            ("norm", self.norm, NORMS),
            ("activation", self.activation, ACTIVATIONS),
            ("positions", self.positions, POSITION_LAYOUTS),
        ):
            if value not in allowed:
                raise ConfigError(f"model.{name} is {value!r}; choose one of {allowed}")
        if self.share_embeddings and self.src_vocab != self.tgt_vocab:
            raise ConfigError(
                f"model.share_embeddings needs one vocabulary: src_vocab {self.src_vocab} != tgt_vocab {self.tgt_vocab}"
            )


ModelConfig = RNNConfig | TransformerConfig


@dataclass(frozen=True)
class DataConfig:
    """What a run trains on. This project's own models are English-Chinese (models/data.py reads
    that corpus); converted models may be any pair and never come through here."""

    source: str = "en"
    target: str = "zh"
    corpus: str | None = None  # None: the shared corpus (models/data.py finds it)
    src_vocab_size: int = 8000
    tgt_vocab_size: int = 8000
    max_src_tokens: int = 64  # longer training pairs are dropped; also the model's input limit
    max_tgt_tokens: int = 64
    name_augmentation: float = 0.0  # share of Tom/Mary training pairs copied with another name (models/augment.py)
    # Add the real-text pairs' training split (news and health, ../shared/data/news-zh-en; its dev
    # and test splits stay held out): the path comes from $ATTENTION_MT_REAL_TEXT or the default.
    real_text: bool = False
    # One SentencePiece vocabulary for both languages (src_vocab_size pieces, trained on both
    # sides), so names, numbers and Latin words are the same pieces on both sides and a model
    # can share (tie) its embeddings (model.share_embeddings).
    joint_vocab: bool = False
    # A TSV of synthetic pairs (models/synthetic.py: back-translations of the training splits) added
    # to the training split only; a pair sharing a sentence with a dev or test split is dropped.
    synthetic: str | None = None

    def __post_init__(self) -> None:
        if {self.source, self.target} != set(LANGUAGES):
            raise ConfigError(f"data.source/target must be en and zh in some order, got {self.source}->{self.target}")
        if self.joint_vocab and self.src_vocab_size != self.tgt_vocab_size:
            raise ConfigError(
                f"data.joint_vocab needs one size: src_vocab_size {self.src_vocab_size} != tgt_vocab_size "
                f"{self.tgt_vocab_size}"
            )


DECAYS = ("inverse_sqrt", "linear")


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 30
    max_steps: int = 0  # 0: no step limit
    batch_tokens: int = 3000  # padded source + target tokens per batch
    lr: float = 7e-4
    warmup_steps: int = 800
    # After the warm-up: "inverse_sqrt" (Vaswani et al.), or "linear" to zero at the end of `epochs`
    # (or `max_steps`), which anneals a run that a time budget cut off while its rate was still high.
    decay: str = "inverse_sqrt"
    weight_decay: float = 0.0
    label_smoothing: float = 0.1
    clip_norm: float = 1.0
    seed: int = 1234
    patience: int = 5  # epochs without a better dev BLEU before stopping
    dev_sentences: int = 500  # dev pairs decoded for BLEU each epoch (0 = all)
    checkpoint_every: int = 200  # steps between mid-epoch checkpoints
    log_every: int = 50  # steps between plain log lines when not on a TTY
    # A time budget (a lent GPU's minutes) for each invocation, a resumed one too: stop after the
    # epoch that passes it, dev BLEU included.
    max_minutes: float = 0.0  # 0: no time limit
    # Keep the weights (epoch-NNN.pt) of the best epoch, the keep_epochs - 1 before it and every
    # epoch since, so `attention-mt average` can take the window up to the best; 0 keeps none.
    keep_epochs: int = 0
    # Guided alignment (models/guided.py): the weight of the loss that pulls one cross-attention
    # head towards eflomal word alignments; 0 turns it off. Layer and head index the model's
    # (layer, head) cross-attention; negative layers count from the last.
    guided_alignment: float = 0.0
    guided_layer: int = -1
    guided_head: int = 0

    def __post_init__(self) -> None:
        if self.decay not in DECAYS:
            raise ConfigError(f"train.decay is {self.decay!r}; it must be one of {', '.join(DECAYS)}")
        if self.max_minutes < 0 or self.keep_epochs < 0:
            raise ConfigError(
                f"train.max_minutes ({self.max_minutes}) and train.keep_epochs ({self.keep_epochs}) must be >= 0"
            )


@dataclass(frozen=True)
class RunConfig:
    model: ModelConfig
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _build(cls: type[Any], table: dict[str, Any], section: str) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(table) - names)
    if unknown:
        raise ConfigError(f"unknown key(s) in [{section}]: {', '.join(unknown)}; known: {', '.join(sorted(names))}")
    try:
        return cls(**table)
    except TypeError as exc:
        raise ConfigError(f"[{section}]: {exc}") from exc


def model_config_from_dict(table: dict[str, Any]) -> ModelConfig:
    family = table.get("family")
    classes: dict[str, type[Any]] = {"rnn": RNNConfig, "transformer": TransformerConfig}
    if family not in classes:
        raise ConfigError(f"model.family is {family!r}; choose one of {sorted(classes)}")
    config: ModelConfig = _build(classes[family], table, "model")
    return config


def run_config_from_dict(doc: dict[str, Any]) -> RunConfig:
    unknown = sorted(set(doc) - {"model", "data", "train"})
    if unknown:
        raise ConfigError(f"unknown table(s): {', '.join(unknown)}; a run has [model], [data], [train]")
    if "model" not in doc:
        raise ConfigError("a run config needs a [model] table")
    return RunConfig(
        model=model_config_from_dict(doc["model"]),
        data=_build(DataConfig, doc.get("data", {}), "data"),
        train=_build(TrainConfig, doc.get("train", {}), "train"),
    )


def load_run_config(path: str | Path) -> RunConfig:
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from exc
    return run_config_from_dict(doc)
