"""The Transformer family: encoder-decoder with multi-head scaled dot-product attention.

This project's own models are pre-norm; converted Marian / OPUS-MT checkpoints are post-norm with
their own activation, position layout and logits bias (TransformerConfig names each option).

Incremental decoding carries a KV cache: `past_key.{i}` / `past_value.{i}` (B, N, P, D) per decoder
layer grow by one position a step; the cross-attention keys and values `cross_key.{i}` /
`cross_value.{i}` (B, N, S, D) are computed once by `encode`.

Legend: B batch, S source length, T target length, P past length, H d_model, N heads,
D head dim, F feed-forward size, L layers, V vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.config import TransformerConfig
from models.seq2seq import Encoded, ForwardOutput, StepOutput
from service.engine.tokenizer import PAD_ID


def sinusoidal_positions(max_positions: int, dim: int, layout: str = "interleaved") -> Tensor:
    """The fixed sine/cosine position table (P, H) of Vaswani et al.

    "interleaved": sin and cos alternate (this project); "halves": all sines, then all cosines,
    computed in float64 as Marian and transformers' MarianSinusoidalPositionalEmbedding do."""
    if layout == "halves":
        pos = torch.arange(max_positions, dtype=torch.float64).unsqueeze(1)  # (P, 1)
        angles = pos / torch.pow(10000.0, torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (P, ceil(H/2))
        return torch.cat([torch.sin(angles), torch.cos(angles[:, : dim // 2])], dim=1).float()
    pos = torch.arange(max_positions, dtype=torch.float32).unsqueeze(1)  # (P, 1)
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))  # (H/2,)
    table = torch.zeros(max_positions, dim)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)
    return table


ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu}


class MultiHeadAttention(nn.Module):
    """softmax(Q K^T / sqrt(D)) V over N heads; returns the output and the weights (B, N, T, S)."""

    def __init__(self, d_model: int, heads: int, attn_dropout: float) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, d_model // heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(attn_dropout)

    def split_heads(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.heads, self.head_dim).transpose(1, 2)  # (B, N, T, D)

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of x (B, S, H) -> (B, N, S, D) each."""
        return self.split_heads(self.k_proj(x)), self.split_heads(self.v_proj(x))

    def forward(self, x: Tensor, key: Tensor, value: Tensor, blocked: Tensor | None) -> tuple[Tensor, Tensor]:
        """x (B, T, H) attends to key/value (B, N, S, D); blocked broadcasts to (B, N, T, S), True = masked."""
        q = self.split_heads(self.q_proj(x))  # (B, N, T, D)
        scores = q @ key.transpose(-1, -2) / math.sqrt(self.head_dim)  # (B, N, T, S)
        if blocked is not None:
            scores = scores.masked_fill(blocked, float("-inf"))
        weights = torch.softmax(scores, dim=-1)  # (B, N, T, S)
        out = self.dropout(weights) @ value  # (B, N, T, D)
        B, _, T, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(B, T, -1)), weights  # (B, T, H)


class FeedForward(nn.Module):
    def __init__(self, d_model: int, ff_dim: int, dropout: float, activation: str = "relu") -> None:
        super().__init__()
        self.up, self.down, self.dropout = (
            nn.Linear(d_model, ff_dim),
            nn.Linear(ff_dim, d_model),
            nn.Dropout(dropout),
        )
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.dropout(self.activation(self.up(x))))  # (B, T, H)


class PrePostNorm(nn.Module):
    """Where a layer's norms go: before each sublayer (pre-norm) or after each residual sum (post-norm).

    Subclasses name their norms norm1, norm2, ... (the names the exported graphs keep)."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.pre = cfg.norm == "pre"
        self.dropout = nn.Dropout(cfg.dropout)

    def sublayer_input(self, norm: nn.Module, x: Tensor) -> Tensor:
        return norm(x) if self.pre else x

    def residual(self, norm: nn.Module, x: Tensor, out: Tensor) -> Tensor:
        x = x + self.dropout(out)
        return x if self.pre else norm(x)


class EncoderLayer(PrePostNorm):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__(cfg)
        self.norm1, self.norm2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attn_dropout)
        self.ff = FeedForward(cfg.d_model, cfg.ff_dim, cfg.dropout, cfg.activation)

    def forward(self, x: Tensor, blocked: Tensor) -> tuple[Tensor, Tensor]:
        """x (B, S, H), blocked (B, 1, 1, S) -> x (B, S, H), self-attention (B, N, S, S)."""
        h = self.sublayer_input(self.norm1, x)
        k, v = self.self_attn.project_kv(h)
        out, weights = self.self_attn(h, k, v, blocked)
        x = self.residual(self.norm1, x, out)
        return self.residual(self.norm2, x, self.ff(self.sublayer_input(self.norm2, x))), weights


class DecoderLayer(PrePostNorm):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__(cfg)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(cfg.d_model) for _ in range(3))
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attn_dropout)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attn_dropout)
        self.ff = FeedForward(cfg.d_model, cfg.ff_dim, cfg.dropout, cfg.activation)

    def forward(
        self,
        x: Tensor,
        past: tuple[Tensor, Tensor] | None,
        self_blocked: Tensor | None,
        cross: tuple[Tensor, Tensor],
        cross_blocked: Tensor,
        slot: Tensor | None = None,
    ) -> tuple[Tensor, tuple[Tensor, Tensor], Tensor, Tensor]:
        """x (B, T, H) with past keys/values (B, N, P, D) -> x, present (B, N, P+T, D), self and cross weights.
        With `slot` (B, 1, P, 1), True at each row's position, one step's keys and values are written
        into the cache there instead (present (B, N, P, D)): rows at different positions share a batch."""
        h = self.sublayer_input(self.norm1, x)
        k, v = self.self_attn.project_kv(h)  # (B, N, T, D)
        if past is not None and slot is not None:
            k, v = torch.where(slot, k, past[0]), torch.where(slot, v, past[1])  # (B, N, P, D)
        elif past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)  # (B, N, P+T, D)
        out, self_weights = self.self_attn(h, k, v, self_blocked)  # (B, N, T, P+T)
        x = self.residual(self.norm1, x, out)
        h = self.sublayer_input(self.norm2, x)
        out, cross_weights = self.cross_attn(h, cross[0], cross[1], cross_blocked)  # (B, N, T, S)
        x = self.residual(self.norm2, x, out)
        x = self.residual(self.norm3, x, self.ff(self.sublayer_input(self.norm3, x)))
        return x, (k, v), self_weights, cross_weights


class Transformer(nn.Module):
    positions: Tensor  # (P, H) buffer

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.config = cfg
        self.src_embed = nn.Embedding(cfg.src_vocab, cfg.d_model, padding_idx=PAD_ID)
        self.tgt_embed = self.src_embed if cfg.share_embeddings else nn.Embedding(cfg.tgt_vocab, cfg.d_model, PAD_ID)
        positions = sinusoidal_positions(cfg.max_positions, cfg.d_model, cfg.positions)
        self.register_buffer("positions", positions, persistent=False)
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.enc_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.dec_layers))
        # post-norm already ends every layer with a layer norm: no final one
        final: type[nn.Module] = nn.LayerNorm if cfg.norm == "pre" else nn.Identity
        self.encoder_norm, self.decoder_norm = final(cfg.d_model), final(cfg.d_model)
        self.output = nn.Linear(cfg.d_model, cfg.tgt_vocab, bias=cfg.logits_bias)
        if cfg.tie_output:
            self.output.weight = self.tgt_embed.weight
        self.dropout = nn.Dropout(cfg.dropout)
        self.scale = math.sqrt(cfg.d_model) if cfg.scale_embedding else 1.0
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=module.embedding_dim**-0.5)
            nn.init.zeros_(module.weight[PAD_ID])

    def _embed(self, embedding: nn.Embedding, ids: Tensor, offset: Tensor | int = 0) -> Tensor:
        T = ids.shape[1]
        pos = self.positions[offset : offset + T]  # (T, H)
        return self.dropout(embedding(ids) * self.scale + pos)  # (B, T, H)

    def encode(self, src_ids: Tensor, src_pad_mask: Tensor, need_weights: bool = False) -> Encoded:
        blocked = src_pad_mask[:, None, None, :]  # (B, 1, 1, S)
        x = self._embed(self.src_embed, src_ids)  # (B, S, H)
        self_weights = []
        for layer in self.encoder_layers:
            x, weights = layer(x, blocked)
            self_weights.append(weights)
        memory = self.encoder_norm(x)  # (B, S, H)
        statics: dict[str, Tensor] = {}
        state: dict[str, Tensor] = {}
        B = src_ids.shape[0]
        for i, layer in enumerate(self.decoder_layers):
            assert isinstance(layer, DecoderLayer)
            statics[f"cross_key.{i}"], statics[f"cross_value.{i}"] = layer.cross_attn.project_kv(memory)
            empty = memory.new_zeros(B, self.config.heads, 0, self.config.d_model // self.config.heads)
            state[f"past_key.{i}"], state[f"past_value.{i}"] = empty, empty
        attention = torch.stack(self_weights, dim=1) if need_weights else None  # (B, L, N, S, S)
        return Encoded(statics=statics, state=state, self_attention=attention)

    def _decode(
        self,
        tgt_ids: Tensor,
        statics: dict[str, Tensor],
        src_pad_mask: Tensor,
        state: dict[str, Tensor] | None,
        self_blocked: Tensor | None,
        positions: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, Tensor], Tensor, Tensor]:
        """Run the decoder stack on tgt_ids (B, T) after the cached past; returns logits (B, T, V),
        the present cache, cross-attention (B, L, N, T, S) and self-attention (B, L, N, T, P+T).
        With `positions` (B,), one step whose rows each sit at their own position in a cache of
        fixed width P (decode_step_at): present (B, N, P, D), self-attention (B, L, N, 1, P)."""
        slot = None
        if positions is None:
            past_len = 0 if state is None else state["past_key.0"].shape[2]
            x = self._embed(self.tgt_embed, tgt_ids, past_len)  # (B, T, H)
        else:
            assert state is not None
            x = self.dropout(self.tgt_embed(tgt_ids) * self.scale + self.positions[positions][:, None])  # (B, 1, H)
            slots = torch.arange(state["past_key.0"].shape[2], device=tgt_ids.device)  # (P,)
            slot = (slots[None, :] == positions[:, None])[:, None, :, None]  # (B, 1, P, 1) where this step writes
            self_blocked = (slots[None, :] > positions[:, None])[:, None, None, :]  # (B, 1, 1, P) not written yet
        cross_blocked = src_pad_mask[:, None, None, :]  # (B, 1, 1, S)
        present: dict[str, Tensor] = {}
        cross_weights, self_weights = [], []
        for i, layer in enumerate(self.decoder_layers):
            past = None if state is None else (state[f"past_key.{i}"], state[f"past_value.{i}"])
            cross = (statics[f"cross_key.{i}"], statics[f"cross_value.{i}"])
            x, (k, v), s_w, c_w = layer(x, past, self_blocked, cross, cross_blocked, slot)
            present[f"past_key.{i}"], present[f"past_value.{i}"] = k, v
            self_weights.append(s_w)
            cross_weights.append(c_w)
        logits = self.output(self.decoder_norm(x))  # (B, T, V)
        return logits, present, torch.stack(cross_weights, dim=1), torch.stack(self_weights, dim=1)

    def decode_step(
        self, prev_tokens: Tensor, statics: dict[str, Tensor], src_pad_mask: Tensor, state: dict[str, Tensor]
    ) -> StepOutput:
        logits, present, cross, self_weights = self._decode(prev_tokens[:, None], statics, src_pad_mask, state, None)
        return StepOutput(
            log_probs=F.log_softmax(logits[:, 0], dim=-1),  # (B, V)
            cross_attention=cross[:, :, :, 0],  # (B, L, N, S)
            state=present,
            self_attention=self_weights[:, :, :, 0],  # (B, L, N, P+1)
        )

    def decode_step_at(
        self,
        prev_tokens: Tensor,
        positions: Tensor,
        statics: dict[str, Tensor],
        src_pad_mask: Tensor,
        state: dict[str, Tensor],
    ) -> StepOutput:
        """decode_step for rows at different positions (B,): row b writes its keys and values at
        slot positions[b] of a cache (B, N, P, D) with P > max(positions), and attends to slots
        0..positions[b]. New sentences can join a batch mid-decode (the service's scheduler)."""
        logits, present, cross, self_weights = self._decode(
            prev_tokens[:, None], statics, src_pad_mask, state, None, positions
        )
        return StepOutput(
            log_probs=F.log_softmax(logits[:, 0], dim=-1),  # (B, V)
            cross_attention=cross[:, :, :, 0],  # (B, L, N, S)
            state=present,
            self_attention=self_weights[:, :, :, 0],  # (B, L, N, P)
        )

    def forward(
        self, src_ids: Tensor, src_pad_mask: Tensor, tgt_in: Tensor, need_weights: bool = False
    ) -> ForwardOutput:
        """Teacher forcing: tgt_in (B, T) starts with BOS -> logits (B, T, V) and attention."""
        enc = self.encode(src_ids, src_pad_mask, need_weights)
        T = tgt_in.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=tgt_in.device).triu(1)  # (T, T) True = future
        logits, _, cross, self_weights = self._decode(tgt_in, enc.statics, src_pad_mask, None, causal)
        return ForwardOutput(
            logits=logits,
            cross_attention=cross,  # (B, L, N, T, S)
            decoder_self_attention=self_weights if need_weights else None,  # (B, L, N, T, T)
            encoder_self_attention=enc.self_attention,
        )
