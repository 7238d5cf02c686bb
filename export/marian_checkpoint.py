"""Reading a Hugging Face Marian (OPUS-MT) checkpoint directory, and refusing what we cannot serve.

The directory is what `save_pretrained` writes: `config.json`, the weights, `source.spm` and
`target.spm`, `vocab.json` (and `target_vocab.json` for separate vocabularies), and usually
`generation_config.json`. Every setting the converted bundle depends on is read here and checked;
every problem is collected and reported at once, naming its file and field. Missing settings take
transformers' own defaults, so the bundle decodes as `generate()` would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import GenerationConfig, MarianConfig

from export.bundle_writer import ExportError
from service.engine.errors import TokenizerError
from service.engine.vocab_tokenizer import read_vocab

CONFIG, GENERATION = "config.json", "generation_config.json"
WEIGHTS = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json")
ACTIVATIONS = {"swish": "swish", "silu": "swish", "gelu": "gelu", "relu": "relu"}
# Settings transformers ignores for Marian but whose other value means the weights expect a
# computation transformers' MarianMTModel does not do (it is always post-norm, sinusoidal, with no
# embedding or final layer norm): converting such a checkpoint would serve a different model.
MUST_BE = {
    "normalize_before": (False, "transformers' MarianMTModel is always post-norm and ignores it"),
    "normalize_embedding": (False, "transformers' MarianMTModel has no embedding layer norm"),
    "add_final_layer_norm": (False, "transformers' MarianMTModel has no final layer norm"),
    "static_position_embeddings": (True, "transformers' MarianMTModel has sinusoidal positions only"),
    "is_encoder_decoder": (True, "a Marian translation model is an encoder-decoder"),
}
# generate() options that change what is generated, at the values that leave it alone.
NEUTRAL_GENERATION = {
    "do_sample": False,
    "num_beam_groups": 1,
    "diversity_penalty": 0.0,
    "early_stopping": False,
    "encoder_no_repeat_ngram_size": 0,
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "min_length": 0,
    "min_new_tokens": None,
    "forced_bos_token_id": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "exponential_decay_length_penalty": None,
    "sequence_bias": None,
    "guidance_scale": None,
}


class ConversionError(ExportError):
    """A checkpoint that cannot become a bundle; the message names every problem, by file and field."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("cannot convert: " + "; ".join(problems))


@dataclass(frozen=True)
class Generation:
    """What `generate()` does by default, with transformers' defaults filled in."""

    num_beams: int
    length_penalty: float
    max_length: int  # counts the decoder start token, as transformers does
    forced_eos: bool
    suppressed_ids: list[int]  # bad_words_ids of one token each
    renormalize: bool
    no_repeat_ngram: int


@dataclass(frozen=True)
class MarianCheckpoint:
    directory: Path
    config: dict[str, Any]  # config.json with MarianConfig's defaults filled in
    generation: Generation
    separate_vocabs: bool
    source_vocab: dict[str, int]
    target_vocab: dict[str, int]
    weights: Path

    @property
    def vocab_files(self) -> tuple[str, str]:
        return "vocab.json", "target_vocab.json" if self.separate_vocabs else "vocab.json"

    @property
    def pad_id(self) -> int:
        return int(self.config["pad_token_id"])

    @property
    def eos_id(self) -> int:
        return int(self.config["eos_token_id"])

    @property
    def start_id(self) -> int:
        return int(self.config["decoder_start_token_id"])


def _read_json(path: Path, problems: list[str]) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        problems.append(f"{path.name}: missing")
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        problems.append(f"{path.name}: not readable JSON ({exc})")
        return None
    if not isinstance(doc, dict):
        problems.append(f"{path.name}: not a JSON object")
        return None
    return doc


def read_config(directory: Path, problems: list[str]) -> dict[str, Any] | None:
    """config.json as transformers reads it (MarianConfig's defaults filled in), or None with problems."""
    doc = _read_json(directory / CONFIG, problems)
    if doc is None:
        return None
    if doc.get("model_type") != "marian":
        problems.append(
            f'{CONFIG}: model_type is {doc.get("model_type")!r}; only Marian ("marian") checkpoints convert'
        )
        return None
    defaults = MarianConfig().to_dict()
    config = {**defaults, **doc}
    config["decoder_vocab_size"] = config.get("decoder_vocab_size") or config["vocab_size"]
    architectures = doc.get("architectures") or ["MarianMTModel"]
    if "MarianMTModel" not in architectures:
        problems.append(
            f"{CONFIG}: architectures is {architectures}; only MarianMTModel (a translation model) converts"
        )
    if config["activation_function"] not in ACTIVATIONS:
        problems.append(
            f"{CONFIG}: activation_function {config['activation_function']!r} is not supported; "
            f"use one of {sorted(ACTIVATIONS)}"
        )
    for key, (value, why) in MUST_BE.items():
        if key in doc and bool(doc[key]) != value:
            problems.append(f"{CONFIG}: {key} is {doc[key]!r}; only {value} converts ({why})")
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if config[a] != config[b]:
            problems.append(f"{CONFIG}: {a} ({config[a]}) differs from {b} ({config[b]}); they must be equal")
    if config["d_model"] % config["encoder_attention_heads"]:
        problems.append(f"{CONFIG}: d_model {config['d_model']} is not divisible by the heads")
    if not isinstance(config["eos_token_id"], int):
        problems.append(f"{CONFIG}: eos_token_id is {config['eos_token_id']!r}; one end token id is supported")
    return config


def _effective(doc: dict[str, Any], key: str) -> Any:
    """A generate() setting: the checkpoint's, else transformers' global default."""
    value = doc.get(key)
    if value is None:
        get_defaults = getattr(GenerationConfig, "_get_default_generation_params", None)
        value = (get_defaults() if get_defaults else GenerationConfig().to_dict()).get(key)
    return value


def read_generation(directory: Path, config: dict[str, Any], problems: list[str]) -> Generation | None:
    """generation_config.json (or, without one, what transformers derives from config.json)."""
    path = directory / GENERATION
    if path.exists():
        if _read_json(path, problems) is None:
            return None
        doc = GenerationConfig.from_pretrained(directory, local_files_only=True).to_dict()
        where = GENERATION
    else:
        doc = GenerationConfig.from_model_config(MarianConfig.from_dict(config)).to_dict()
        where = f"{CONFIG} (no {GENERATION})"
    for key, neutral in NEUTRAL_GENERATION.items():
        value = _effective(doc, key)
        if value != neutral and not (neutral is None and value in ([], {})):
            problems.append(f"{where}: {key} is {value!r}; only {neutral!r} is supported (the search would differ)")
    eos = _effective(doc, "eos_token_id")
    if eos is not None and ([eos] if isinstance(eos, int) else list(eos)) != [config["eos_token_id"]]:
        problems.append(f"{where}: eos_token_id is {eos!r}; one end token, {config['eos_token_id']}, is supported")
    forced = _effective(doc, "forced_eos_token_id")
    if forced is not None and forced != config["eos_token_id"]:
        problems.append(f"{where}: forced_eos_token_id is {forced!r}; only the end token is supported")
    bad_words = _effective(doc, "bad_words_ids") or []
    if any(len(sequence) != 1 for sequence in bad_words):
        problems.append(f"{where}: bad_words_ids has sequences of several tokens; single tokens only are supported")
    max_new = _effective(doc, "max_new_tokens")
    return Generation(
        num_beams=int(_effective(doc, "num_beams")),
        length_penalty=float(_effective(doc, "length_penalty")),
        max_length=int(max_new) + 1 if max_new is not None else int(_effective(doc, "max_length")),
        forced_eos=forced is not None,
        suppressed_ids=sorted({int(sequence[0]) for sequence in bad_words if len(sequence) == 1}),
        renormalize=bool(_effective(doc, "renormalize_logits")),
        no_repeat_ngram=int(_effective(doc, "no_repeat_ngram_size") or 0),
    )


def _vocabulary(path: Path, size: int, size_field: str, problems: list[str]) -> dict[str, int]:
    if not path.is_file():
        problems.append(f"{path.name}: missing (the tokenizer needs it)")
        return {}
    try:
        vocab = read_vocab(path)
    except TokenizerError as exc:
        problems.append(exc.message)
        return {}
    if len(vocab) != size:
        problems.append(f"{path.name}: {len(vocab)} tokens, but {CONFIG} {size_field} (the embedding size) is {size}")
    return vocab


def _check_specials(
    config: dict[str, Any], source: dict[str, int], target: dict[str, int], problems: list[str]
) -> None:
    for vocab, name in ((source, "vocab.json"), (target, "the target vocabulary")):
        if not vocab:
            continue
        if "<unk>" not in vocab:
            problems.append(f"{name}: has no <unk> token")
        if vocab.get("</s>") != config["eos_token_id"]:
            problems.append(
                f"{name}: </s> is {vocab.get('</s>')}, but {CONFIG} eos_token_id is {config['eos_token_id']}"
            )
    if target and "<pad>" in target and target["<pad>"] != config["pad_token_id"]:
        problems.append(
            f"the target vocabulary: <pad> is {target['<pad>']}, but pad_token_id is {config['pad_token_id']}"
        )


def read_checkpoint(directory: Path, target_token: str | None = None) -> MarianCheckpoint:
    """Read and check everything the conversion needs; raise ConversionError naming every problem."""
    if not directory.is_dir():
        raise ConversionError([f"{directory}: not a directory"])
    problems: list[str] = []
    config = read_config(directory, problems)
    if config is None:
        raise ConversionError(problems)
    generation = read_generation(directory, config, problems)
    weights = next((directory / name for name in WEIGHTS if (directory / name).is_file()), None)
    if weights is None:
        problems.append(f"no weights: none of {', '.join(WEIGHTS)}")
    for name in ("source.spm", "target.spm"):
        if not (directory / name).is_file():
            problems.append(f"{name}: missing (the tokenizer needs it)")
    separate = not config["share_encoder_decoder_embeddings"]
    source_vocab = _vocabulary(directory / "vocab.json", config["vocab_size"], "vocab_size", problems)
    target_vocab = (
        _vocabulary(directory / "target_vocab.json", config["decoder_vocab_size"], "decoder_vocab_size", problems)
        if separate
        else source_vocab
    )
    _check_specials(config, source_vocab, target_vocab, problems)
    if target_token is not None and source_vocab and target_token not in source_vocab:
        languages = sorted(t for t in source_vocab if t.startswith(">>") and t.endswith("<<"))
        known = f"; the vocabulary has {', '.join(languages[:12])}" if languages else "; it has no >>xx<< tokens"
        problems.append(f"--target-token {target_token!r} is not in vocab.json{known}")
    if problems or generation is None or weights is None:
        raise ConversionError(problems)
    return MarianCheckpoint(directory, config, generation, separate, source_vocab, target_vocab, weights)
