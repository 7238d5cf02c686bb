"""Convert a Transformer checkpoint of this project into a CTranslate2 model directory.

The benchmark compares our onnxruntime engine with CTranslate2 on the same weights, so the
conversion maps every tensor one to one and fixes what CTranslate2 would otherwise choose for
itself: the position table (ours interleaves sin/cos; CTranslate2's built-in one concatenates
them), the layer norm epsilon (PyTorch's 1e-5) and the special tokens. The vocabularies are the
SentencePiece pieces in id order, so a CTranslate2 token index is our id.

Feeding CTranslate2: source ids already end with EOS (as in `truncated_source_ids`) and are passed
as pieces (`ids_to_tokens`); CTranslate2 starts the target from `<s>` itself, returns neither that
start token nor the final `</s>` (unless `return_end_token=True`), and `tokens_to_ids` maps its
pieces back to our ids.

Same decoding as `service.engine.search` (verified token for token, scores to 1e-5 on fp32):
`translate_batch(tokens, beam_size=K, length_penalty=0.0, min_decoding_length=0,
max_decoding_length=cap)` against our alpha = 0. `max_decoding_length` counts generated tokens with
the EOS (like our max lengths) but is one cap per batch, not per sentence; the default
`min_decoding_length=1` masks EOS before the softmax at the first step, which renormalises that
step's scores. Fixed-length work (n tokens, no EOS) is `min_decoding_length=max_decoding_length=n`;
CT2 masks EOS before its softmax, so beam search only matches a search that renormalises after
forbidding EOS.

    python -m benchmarks.ct2_convert runs/en-zh/best.pt --out build/ct2/en-zh [--quantization int8]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch
from ctranslate2.specs import attention_spec, common_spec, transformer_spec  # type: ignore[import-untyped]
from torch import nn

from models.checkpoint import load_checkpoint
from models.transformer import DecoderLayer, EncoderLayer, FeedForward, MultiHeadAttention, Transformer
from service.engine.tokenizer import BOS_ID, EOS_ID, UNK_ID, Tokenizer

Array = npt.NDArray[np.float32]
LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm's default, which every norm of ours uses


class UnsupportedCheckpointError(ValueError):
    """A checkpoint CTranslate2 cannot run with this converter (e.g. the RNN family)."""


def _array(tensor: torch.Tensor) -> Array:
    """A float32 numpy copy, detached from the model (the spec must not alias live parameters)."""
    return tensor.detach().to(torch.float32).cpu().numpy().copy()


def _set_linear(spec: common_spec.LinearSpec, layer: nn.Linear) -> None:
    spec.weight = _array(layer.weight)  # (out, in): CTranslate2 uses PyTorch's layout
    if layer.bias is not None:
        spec.bias = _array(layer.bias)


def _set_layer_norm(spec: common_spec.LayerNormSpec, norm: nn.LayerNorm) -> None:
    if abs(norm.eps - LAYER_NORM_EPSILON) > 1e-12:
        raise UnsupportedCheckpointError(f"layer norm eps {norm.eps}, the converter writes {LAYER_NORM_EPSILON}")
    spec.gamma = _array(norm.weight)
    spec.beta = _array(norm.bias)


def _fused(spec: common_spec.LinearSpec, layers: Sequence[nn.Linear]) -> None:
    """CTranslate2 fuses projections: self-attention's q|k|v (3H, H), cross-attention's k|v (2H, H)."""
    spec.weight = np.concatenate([_array(layer.weight) for layer in layers])
    spec.bias = np.concatenate([_array(layer.bias) for layer in layers])


def _set_self_attention(spec: attention_spec.MultiHeadAttentionSpec, attn: MultiHeadAttention) -> None:
    _fused(spec.linear[0], [attn.q_proj, attn.k_proj, attn.v_proj])
    _set_linear(spec.linear[1], attn.out_proj)


def _set_cross_attention(spec: attention_spec.MultiHeadAttentionSpec, attn: MultiHeadAttention) -> None:
    _set_linear(spec.linear[0], attn.q_proj)
    _fused(spec.linear[1], [attn.k_proj, attn.v_proj])
    _set_linear(spec.linear[2], attn.out_proj)


def _set_ffn(spec: transformer_spec.FeedForwardSpec, norm: nn.LayerNorm, ff: FeedForward) -> None:
    _set_layer_norm(spec.layer_norm, norm)
    _set_linear(spec.linear_0, ff.up)  # (F, H), ReLU after it
    _set_linear(spec.linear_1, ff.down)  # (H, F)


def _set_inputs(
    spec: transformer_spec.TransformerEncoderSpec | transformer_spec.TransformerDecoderSpec,
    embedding: nn.Embedding,
    positions: torch.Tensor,
) -> None:
    """embedding(ids) * sqrt(H) + positions[t]: CTranslate2's scale_embeddings and an explicit table."""
    spec.scale_embeddings = True
    spec.position_encodings.encodings = _array(positions)  # (P, H) ours, interleaved sin/cos
    weight = _array(embedding.weight)  # (V, H)
    if isinstance(spec.embeddings, list):
        spec.embeddings[0].weight = weight
    else:
        spec.embeddings.weight = weight


def _vocabulary(tokenizer: Tokenizer) -> list[str]:
    """The pieces in id order; they must be distinct, since CTranslate2 maps piece -> index."""
    pieces = [tokenizer.piece(i) for i in range(tokenizer.vocab_size)]
    if len(set(pieces)) != len(pieces):
        raise UnsupportedCheckpointError("the tokenizer has duplicate pieces; CTranslate2 needs distinct tokens")
    return pieces


def build_spec(
    model: Transformer, src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer
) -> transformer_spec.TransformerSpec:
    """The CTranslate2 spec of `model`, weights filled, not yet validated or quantized."""
    cfg = model.config
    encoder = transformer_spec.TransformerEncoderSpec(cfg.enc_layers, cfg.heads, pre_norm=True)
    decoder = transformer_spec.TransformerDecoderSpec(cfg.dec_layers, cfg.heads, pre_norm=True)
    spec = transformer_spec.TransformerSpec(encoder, decoder)

    _set_inputs(encoder, model.src_embed, model.positions)
    for layer_spec, layer in zip(encoder.layer, model.encoder_layers, strict=True):
        assert isinstance(layer, EncoderLayer)
        _set_layer_norm(layer_spec.self_attention.layer_norm, layer.norm1)
        _set_self_attention(layer_spec.self_attention, layer.self_attn)
        _set_ffn(layer_spec.ffn, layer.norm2, layer.ff)
    if not isinstance(model.encoder_norm, nn.LayerNorm) or not isinstance(model.decoder_norm, nn.LayerNorm):
        raise ValueError("this converter writes pre-norm models; use CTranslate2's own Marian converter for post-norm")
    _set_layer_norm(encoder.layer_norm, model.encoder_norm)

    _set_inputs(decoder, model.tgt_embed, model.positions)
    for layer_spec, layer in zip(decoder.layer, model.decoder_layers, strict=True):
        assert isinstance(layer, DecoderLayer)
        _set_layer_norm(layer_spec.self_attention.layer_norm, layer.norm1)
        _set_self_attention(layer_spec.self_attention, layer.self_attn)
        _set_layer_norm(layer_spec.attention.layer_norm, layer.norm2)  # normalises the queries only
        _set_cross_attention(layer_spec.attention, layer.cross_attn)
        _set_ffn(layer_spec.ffn, layer.norm3, layer.ff)
    _set_layer_norm(decoder.layer_norm, model.decoder_norm)
    _set_linear(decoder.projection, model.output)  # (V, H), no bias; tied weights are aliased on save

    src_vocab, tgt_vocab = _vocabulary(src_tokenizer), _vocabulary(tgt_tokenizer)
    spec.register_source_vocabulary(src_vocab)
    spec.register_target_vocabulary(tgt_vocab)
    config = spec.config
    config.unk_token = tgt_vocab[UNK_ID]
    config.bos_token = tgt_vocab[BOS_ID]
    config.eos_token = tgt_vocab[EOS_ID]
    config.decoder_start_token = tgt_vocab[BOS_ID]  # our decoding starts from BOS
    config.add_source_bos = False
    config.add_source_eos = False  # callers pass source ids that already end with EOS
    config.layer_norm_epsilon = LAYER_NORM_EPSILON
    return spec


def convert_checkpoint(checkpoint: Path, out_dir: Path, quantization: str | None = None) -> Path:
    """Write the CTranslate2 model directory of a Transformer checkpoint (replacing `out_dir`)."""
    ckpt = load_checkpoint(checkpoint)
    if ckpt.config.model.family != "transformer" or not isinstance(ckpt.model, Transformer):
        raise UnsupportedCheckpointError(
            f"{checkpoint}: model family {ckpt.config.model.family!r}; "
            "only Transformer checkpoints convert to CTranslate2"
        )
    if not math.isclose(ckpt.model.scale, math.sqrt(ckpt.model.config.d_model)):
        raise UnsupportedCheckpointError(f"{checkpoint}: embedding scale is not sqrt(d_model)")
    spec = build_spec(ckpt.model, ckpt.src_tokenizer, ckpt.tgt_tokenizer)
    spec.validate()
    spec.optimize(quantization=quantization)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    spec.save(str(out_dir))
    return out_dir


def read_vocabularies(model_dir: Path) -> tuple[list[str], list[str]]:
    """The (source, target) token lists of a converted model; CTranslate2 writes one shared file
    instead of two when they are identical."""
    shared = model_dir / "shared_vocabulary.json"
    if shared.exists():
        tokens: list[str] = json.loads(shared.read_text(encoding="utf-8"))
        return tokens, tokens
    source: list[str] = json.loads((model_dir / "source_vocabulary.json").read_text(encoding="utf-8"))
    target: list[str] = json.loads((model_dir / "target_vocabulary.json").read_text(encoding="utf-8"))
    return source, target


def ids_to_tokens(ids: Sequence[int], vocabulary: Sequence[str]) -> list[str]:
    """Our ids -> CTranslate2 tokens (the pieces); keep the EOS that ends a source."""
    return [vocabulary[i] for i in ids]


def tokens_to_ids(tokens: Sequence[str], index: Mapping[str, int]) -> list[int]:
    """CTranslate2 output tokens -> our ids; `index` is {piece: id} of the target vocabulary."""
    return [index[t] for t in tokens]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Convert a Transformer checkpoint to a CTranslate2 model directory.")
    parser.add_argument("checkpoint", type=Path, help="a best.pt / last.pt of a Transformer run")
    parser.add_argument("--out", type=Path, required=True, help="model directory to write (replaced if it exists)")
    parser.add_argument(
        "--quantization", default=None, help="weight type, e.g. int8 (CTranslate2's names); default: float32"
    )
    args = parser.parse_args(argv)
    out = convert_checkpoint(args.checkpoint, args.out, args.quantization)
    print(out)


if __name__ == "__main__":
    main()
