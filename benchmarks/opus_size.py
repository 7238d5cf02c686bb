"""An OPUS-MT-size Marian checkpoint built locally (random weights), and how long convert-hf takes on it.

Helsinki-NLP/opus-mt-en-zh is d_model 512, 6+6 layers, 8 heads, FFN 2048, a shared 65,001-token
vocabulary, swish, post-norm. Speed does not depend on the weights' values, so this builds that
shape with random weights and a real (small) SentencePiece model, padding the vocabulary to 65,001
as OPUS-MT's is. No download: the shape is what matters for conversion and engine speed.

    python -m benchmarks.opus_size --out build/opus-size     # build, convert, print the figures
"""

from __future__ import annotations

import argparse
import io
import json
import time
from pathlib import Path

import sentencepiece as spm
import torch
from transformers import GenerationConfig, MarianConfig, MarianMTModel

from export.convert_hf import ConvertOptions, convert_hf

VOCAB = 65_001  # opus-mt-en-zh's vocab_size; <pad> is the last id
WORDS = ["the", "a", "of", "to", "and", "in", "is", "that", "it", "was", "for", "on", "are", "as", "with", "by"]


def _spm(seed: int) -> bytes:
    """A small SentencePiece model (its pieces need not fill the vocabulary; the rest is padding)."""
    rng = torch.Generator().manual_seed(seed)
    lines = [" ".join(WORDS[i] for i in torch.randint(len(WORDS), (12,), generator=rng).tolist()) for _ in range(2000)]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=200, minloglevel=2, hard_vocab_limit=False
    )
    return model.getvalue()


def build(out: Path, seed: int = 0) -> Path:
    """Write the checkpoint directory (about 300 MB of fp32 safetensors)."""
    out.mkdir(parents=True, exist_ok=True)
    proto = _spm(seed)
    (out / "source.spm").write_bytes(proto)
    (out / "target.spm").write_bytes(proto)
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(proto)
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))]
    tokens = ["</s>", "<unk>", ">>cmn_Hans<<", *pieces]
    tokens += [f"<unused{i}>" for i in range(VOCAB - 1 - len(tokens))]
    vocab = {t: i for i, t in enumerate([*tokens, "<pad>"])}
    (out / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    pad = VOCAB - 1
    config = MarianConfig(
        vocab_size=VOCAB,
        d_model=512,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
        max_position_embeddings=512,
        activation_function="swish",
        scale_embedding=True,
        pad_token_id=pad,
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    model.generation_config = GenerationConfig(
        bad_words_ids=[[pad]], bos_token_id=0, decoder_start_token_id=pad, eos_token_id=0, forced_eos_token_id=0,
        max_length=512, num_beams=4, pad_token_id=pad, renormalize_logits=True,
    )  # fmt: skip
    model.save_pretrained(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("build/opus-size"))
    parser.add_argument("--int8", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()
    checkpoint = build(args.out / "checkpoint")
    built = time.perf_counter() - start
    start = time.perf_counter()
    options = ConvertOptions("en", "zh", target_token=">>cmn_Hans<<", int8=args.int8, force=True)
    bundle = convert_hf(checkpoint, args.out / "bundle", options)
    seconds = time.perf_counter() - start
    m = bundle.manifest
    size = sum(e.size for e in m.files.values())
    print(f"checkpoint built in {built:.1f} s; convert-hf in {seconds:.1f} s (parity included)")
    print(f"bundle {size / 1e6:.0f} MB, {m.architecture.parameters:,} parameters, {m.quantization.mode}")
    print(m.parity.model_dump_json(indent=2))


if __name__ == "__main__":
    main()
