"""A Marian checkpoint's weights in this project's own Transformer (models/transformer.py).

Why not export transformers' module itself: its forward threads a Cache object, mask helpers and
output recorders that change between transformers versions and trace poorly, and its graphs
would not have our contract (cross-attention K/V computed once, one step with every layer's
cross-attention out). Our Transformer takes Marian's variant as config options, so both kinds of
bundle come from one graph builder, and the engine work of later issues applies to both.

Transformers loads the checkpoint (safetensors or .bin, tied weights, dtype) and is the
reference the parity tiers compare against.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from transformers import MarianMTModel

from export.marian_checkpoint import ACTIVATIONS, ConversionError, MarianCheckpoint
from models.config import TransformerConfig
from models.transformer import Transformer
from service.engine.manifest import SearchDefaults


def load_reference(ckpt: MarianCheckpoint) -> MarianMTModel:
    """transformers' own model of the checkpoint, fp32, eager attention (so it returns attention)."""
    try:
        model = MarianMTModel.from_pretrained(
            ckpt.directory, local_files_only=True, attn_implementation="eager", dtype=torch.float32
        )
    except Exception as exc:  # safetensors, torch and transformers each raise their own types
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConversionError([f"{ckpt.weights.name}: transformers cannot load it ({reason})"]) from exc
    return model.eval()


def model_config(ckpt: MarianCheckpoint, reference: MarianMTModel) -> TransformerConfig:
    c = ckpt.config
    decoder = reference.model.decoder
    return TransformerConfig(
        src_vocab=c["vocab_size"],
        tgt_vocab=c["decoder_vocab_size"] if ckpt.separate_vocabs else c["vocab_size"],
        d_model=c["d_model"],
        heads=c["encoder_attention_heads"],
        ff_dim=c["encoder_ffn_dim"],
        enc_layers=c["encoder_layers"],
        dec_layers=c["decoder_layers"],
        dropout=0.0,
        attn_dropout=0.0,
        max_positions=c["max_position_embeddings"],
        tie_output=reference.lm_head.weight is decoder.embed_tokens.weight,
        norm="post",
        activation=ACTIVATIONS[c["activation_function"]],
        positions="halves",
        scale_embedding=bool(c["scale_embedding"]),
        share_embeddings=reference.model.encoder.embed_tokens.weight is decoder.embed_tokens.weight,
        logits_bias=True,
    )


def _attention(prefix: str, hf: nn.Module) -> dict[str, Tensor]:
    projections = ("q_proj", "k_proj", "v_proj", "out_proj")  # the same names on both sides
    return {f"{prefix}.{p}.{k}": v for p in projections for k, v in getattr(hf, p).state_dict().items()}


def _norm(prefix: str, hf: nn.Module) -> dict[str, Tensor]:
    return {f"{prefix}.{k}": v for k, v in hf.state_dict().items()}


def _feed_forward(prefix: str, layer: Any) -> dict[str, Tensor]:  # an encoder or decoder layer
    return {f"{prefix}.up.{k}": v for k, v in layer.fc1.state_dict().items()} | {
        f"{prefix}.down.{k}": v for k, v in layer.fc2.state_dict().items()
    }


def our_state(reference: MarianMTModel) -> dict[str, Tensor]:
    """transformers' Marian parameters under our Transformer's names."""
    encoder, decoder = reference.model.encoder, reference.model.decoder
    state = {
        "src_embed.weight": encoder.embed_tokens.weight,
        "tgt_embed.weight": decoder.embed_tokens.weight,
        "output.weight": reference.lm_head.weight,
        "output.bias": reference.final_logits_bias[0],
    }
    for i, layer in enumerate(encoder.layers):
        state |= _attention(f"encoder_layers.{i}.self_attn", layer.self_attn)
        state |= _norm(f"encoder_layers.{i}.norm1", layer.self_attn_layer_norm)
        state |= _feed_forward(f"encoder_layers.{i}.ff", layer)
        state |= _norm(f"encoder_layers.{i}.norm2", layer.final_layer_norm)
    for i, layer in enumerate(decoder.layers):
        state |= _attention(f"decoder_layers.{i}.self_attn", layer.self_attn)
        state |= _norm(f"decoder_layers.{i}.norm1", layer.self_attn_layer_norm)
        state |= _attention(f"decoder_layers.{i}.cross_attn", layer.encoder_attn)
        state |= _norm(f"decoder_layers.{i}.norm2", layer.encoder_attn_layer_norm)
        state |= _feed_forward(f"decoder_layers.{i}.ff", layer)
        state |= _norm(f"decoder_layers.{i}.norm3", layer.final_layer_norm)
    return {k: v.detach().float() for k, v in state.items()}


def convert_weights(ckpt: MarianCheckpoint, reference: MarianMTModel) -> Transformer:
    """Our Transformer holding the reference's weights, in eval mode."""
    cfg = model_config(ckpt, reference)
    model = Transformer(cfg)
    missing, unexpected = model.load_state_dict(our_state(reference), strict=False)
    if missing or unexpected:  # a bug in the name mapping, not the user's checkpoint
        raise RuntimeError(f"weight mapping incomplete: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():  # transformers' own sinusoid table, to the last bit
        model.positions.copy_(reference.model.encoder.embed_positions.weight.detach().float())
    return model.eval()


def search_defaults(ckpt: MarianCheckpoint) -> SearchDefaults:
    """The checkpoint's generate() defaults, as the engine's search runs them."""
    g = ckpt.generation
    return SearchDefaults(
        beam_size=g.num_beams,
        length_penalty="power",
        alpha=g.length_penalty,
        coverage_penalty=0.0,
        stopping="transformers",
        max_output_tokens=g.max_length - 1,  # transformers' max_length counts the start token
        max_output_ratio=None,
        no_repeat_ngram=g.no_repeat_ngram,
        forced_eos=g.forced_eos,
        suppressed_ids=g.suppressed_ids,
        renormalize=g.renormalize,
    )
