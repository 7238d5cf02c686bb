"""Small Hugging Face Marian checkpoints built here, as `save_pretrained` writes them (no hub).

Each one has SentencePiece models trained on the synthetic corpus, a `vocab.json` (and a
`target_vocab.json` for separate vocabularies) laid out as OPUS-MT's are (`</s>` 0, `<unk>` 1,
pieces, `<pad>` last), and weights trained for a few hundred steps so that what it writes
depends on what it reads: random post-norm weights give one token for every input.
"""

from __future__ import annotations

import io
import itertools
import json
import random
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sentencepiece as spm
import torch

from tests.support.synthetic import synthetic_pairs

DE_NAMES = ["Tom", "Mary", "John", "Jerry", "Alice", "Bob"]
DE_VERBS = {"chases": "jagt", "likes": "mag", "sees": "sieht", "helps": "hilft", "calls": "ruft"}
DE_TIMES = {"": "", " today": " heute", " again": " wieder"}


def english_german_pairs() -> list[tuple[str, str]]:
    """("Tom chases Jerry today.", "Tom jagt Jerry heute."): 6 * 5 * 5 * 3 = 450 pairs."""
    pairs = []
    for s, (v_en, v_de), o, (t_en, t_de) in itertools.product(DE_NAMES, DE_VERBS.items(), DE_NAMES, DE_TIMES.items()):
        if s != o:
            pairs.append((f"{s} {v_en} {o}{t_en}.", f"{s} {v_de} {o}{t_de}."))
    return pairs


@dataclass(frozen=True)
class MarianSpec:
    """One test checkpoint: its language pair and the Marian options it exercises."""

    pairs: list[tuple[str, str]]
    activation: str = "swish"
    shared_vocab: bool = True
    target_token: str | None = None  # e.g. ">>deu<<": written before every training source
    tie_word_embeddings: bool = True
    scale_embedding: bool = True
    d_model: int = 64
    layers: int = 2
    heads: int = 4
    ffn: int = 128
    max_positions: int = 64
    steps: int = 300
    seed: int = 7
    generation: dict[str, Any] = field(default_factory=dict)  # generation_config.json overrides
    config_overrides: dict[str, Any] = field(default_factory=dict)  # written into config.json as is


def _train_spm(texts: list[str], vocab_size: int) -> bytes:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=model,
        model_type="unigram",
        vocab_size=vocab_size,
        hard_vocab_limit=False,
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
    )
    return model.getvalue()


def _pieces(proto: bytes) -> list[str]:
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(proto)
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))]


def _vocab(pieces: list[str], extra: list[str], size: int = 0) -> dict[str, int]:
    """OPUS-MT's layout: `</s>` 0, `<unk>` 1, the language tokens and pieces, `<pad>` last.

    `size` fills up with unused tokens first: separate vocabularies of one size share pad's id,
    which transformers' Marian uses as the decoder's start token in the target vocabulary."""
    tokens = ["</s>", "<unk>", *extra, *dict.fromkeys(pieces)]
    tokens += [f"<unused{i}>" for i in range(size - 1 - len(tokens))]
    vocab = {token: i for i, token in enumerate(tokens)}
    vocab["<pad>"] = len(vocab)
    return vocab


def build_marian(spec: MarianSpec, out: Path) -> Path:
    """Write a trained Marian checkpoint directory (config, weights, tokenizer, generation config)."""
    from transformers import GenerationConfig, MarianConfig, MarianMTModel

    out.mkdir(parents=True, exist_ok=True)
    sources, targets = [s for s, _ in spec.pairs], [t for _, t in spec.pairs]
    (out / "source.spm").write_bytes(_train_spm(sources, 80))
    (out / "target.spm").write_bytes(_train_spm(targets, 80))
    languages = [spec.target_token, ">>xxx<<"] if spec.target_token else []
    src_pieces, tgt_pieces = _pieces((out / "source.spm").read_bytes()), _pieces((out / "target.spm").read_bytes())
    if spec.shared_vocab:
        vocab = _vocab(src_pieces + tgt_pieces, languages)
        target_vocab = vocab
        (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    else:
        size = 1 + max(len(_vocab(src_pieces, languages)), len(_vocab(tgt_pieces, [])))
        vocab, target_vocab = _vocab(src_pieces, languages, size), _vocab(tgt_pieces, [], size)
        (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        (out / "target_vocab.json").write_text(json.dumps(target_vocab, ensure_ascii=False), encoding="utf-8")
    pad = vocab["<pad>"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Recommended: pip install sacremoses": unused by its tokenization
        tokenizer = _tokenizer(out, spec.shared_vocab)
    config = MarianConfig(
        vocab_size=len(vocab),
        decoder_vocab_size=len(target_vocab),
        share_encoder_decoder_embeddings=spec.shared_vocab,
        tie_word_embeddings=spec.tie_word_embeddings,
        d_model=spec.d_model,
        encoder_layers=spec.layers,
        decoder_layers=spec.layers,
        encoder_attention_heads=spec.heads,
        decoder_attention_heads=spec.heads,
        encoder_ffn_dim=spec.ffn,
        decoder_ffn_dim=spec.ffn,
        max_position_embeddings=spec.max_positions,
        activation_function=spec.activation,
        scale_embedding=spec.scale_embedding,
        pad_token_id=pad,
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
        dropout=0.1,
    )
    torch.manual_seed(spec.seed)
    model = MarianMTModel(config)
    with torch.no_grad():  # a non-zero bias, so the conversion must carry it (it is a buffer: not trained)
        model.final_logits_bias.copy_(torch.randn_like(model.final_logits_bias) * 0.5)
    _train(model, tokenizer, spec)
    model.generation_config = GenerationConfig(
        **{
            "bad_words_ids": [[pad]],
            "bos_token_id": 0,
            "decoder_start_token_id": pad,
            "eos_token_id": 0,
            "forced_eos_token_id": 0,
            "max_length": spec.max_positions,
            "num_beams": 4,
            "pad_token_id": pad,
            "renormalize_logits": True,
            **spec.generation,
        }
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    if spec.config_overrides:
        doc = json.loads((out / "config.json").read_text(encoding="utf-8"))
        (out / "config.json").write_text(json.dumps({**doc, **spec.config_overrides}, indent=2), encoding="utf-8")
    return out


def _tokenizer(out: Path, shared_vocab: bool) -> Any:
    from transformers import MarianTokenizer

    return MarianTokenizer(
        str(out / "source.spm"),
        str(out / "target.spm"),
        str(out / "vocab.json"),
        target_vocab_file=None if shared_vocab else str(out / "target_vocab.json"),
        separate_vocabs=not shared_vocab,
    )


def _train(model: Any, tokenizer: Any, spec: MarianSpec) -> None:
    """A few hundred Adam steps of teacher forcing on the pairs (seconds on a CPU)."""
    prefix = f"{spec.target_token} " if spec.target_token else ""
    rng = random.Random(spec.seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(spec.steps):
        batch = rng.sample(spec.pairs, 32)
        inputs = tokenizer(
            [prefix + s for s, _ in batch], text_target=[t for _, t in batch], return_tensors="pt", padding=True
        )
        labels = inputs["labels"].masked_fill(inputs["labels"] == model.config.pad_token_id, -100)
        loss = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()


# (a) the classic OPUS-MT layout, multilingual target; (b) the other options of the variants
ENGLISH_GERMAN = MarianSpec(english_german_pairs(), activation="swish", target_token=">>deu<<")
ENGLISH_CHINESE = MarianSpec(
    synthetic_pairs(),
    activation="gelu",
    shared_vocab=False,
    tie_word_embeddings=False,
    scale_embedding=False,
    max_positions=48,
    generation={"length_penalty": 1.2, "renormalize_logits": False},
)


def write_sample(path: Path, pairs: list[tuple[str, str]]) -> Path:
    """A parallel sample as `--align-sample` reads it: source<TAB>target lines."""
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    return path
