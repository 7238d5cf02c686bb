"""The RNN family: bidirectional GRU encoder, GRU decoder with attention.

Two layouts (`query`). Bahdanau's ("previous"): at step i the attention reads the previous decoder
state s_{i-1}, the context c_i = sum_j a_ij h_j feeds the GRU with the previous target embedding.
Luong's ("current"): the GRU reads y_{i-1} first and the attention reads the new state s_i. In
both the output layer sees [s_i; c_i; y_{i-1}].

Legend: B batch, S source length, T target length, E embedding, H encoder hidden per direction,
M = 2H memory size, D decoder hidden, V vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.attention import Attention
from models.config import RNNConfig
from models.seq2seq import Encoded, ForwardOutput, StepOutput
from service.engine.tokenizer import PAD_ID


def reverse_padded(x: Tensor, lengths: Tensor) -> Tensor:
    """Reverse each sequence of x (B, S, F) within its own length; padding stays at the end."""
    S = x.shape[1]
    pos = torch.arange(S, device=x.device).unsqueeze(0)  # (1, S)
    rev = lengths.unsqueeze(1) - 1 - pos  # (B, S)
    index = torch.where(rev >= 0, rev, pos)  # (B, S)
    return torch.gather(x, 1, index.unsqueeze(-1).expand_as(x))


class GRUEncoder(nn.Module):
    """Bidirectional GRU. The backward direction runs on per-sequence reversed input, so padding
    never reaches a real position in either direction (no packed sequences: export-friendly)."""

    def __init__(self, cfg: RNNConfig) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.src_vocab, cfg.emb_dim, padding_idx=PAD_ID)
        self.forward_layers = nn.ModuleList()
        self.backward_layers = nn.ModuleList()
        for i in range(cfg.enc_layers):
            in_dim = cfg.emb_dim if i == 0 else 2 * cfg.enc_hidden
            self.forward_layers.append(nn.GRU(in_dim, cfg.enc_hidden, batch_first=True))
            self.backward_layers.append(nn.GRU(in_dim, cfg.enc_hidden, batch_first=True))
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, src_ids: Tensor, src_pad_mask: Tensor) -> Tensor:
        """src_ids (B, S), src_pad_mask (B, S) -> memory (B, S, 2H), zero at padding."""
        lengths = (~src_pad_mask).sum(dim=1)  # (B,)
        x = self.dropout(self.embed(src_ids))  # (B, S, E)
        for fwd, bwd in zip(self.forward_layers, self.backward_layers, strict=True):
            out_f, _ = fwd(x)  # (B, S, H)
            out_b, _ = bwd(reverse_padded(x, lengths))  # (B, S, H)
            x = torch.cat([out_f, reverse_padded(out_b, lengths)], dim=-1)  # (B, S, 2H)
            x = self.dropout(x)
        return x.masked_fill(src_pad_mask.unsqueeze(-1), 0.0)


class GRUDecoder(nn.Module):
    """GRU decoder: Bahdanau's (GRU takes [y_{i-1}; c_i], attention from s_{i-1}) or Luong's
    (GRU takes y_{i-1}, attention from s_i)."""

    def __init__(self, cfg: RNNConfig) -> None:
        super().__init__()
        memory_dim = 2 * cfg.enc_hidden
        self.embed = nn.Embedding(cfg.tgt_vocab, cfg.emb_dim, padding_idx=PAD_ID)
        self.attention = Attention(cfg.attention, cfg.dec_hidden, memory_dim, cfg.attn_dim)
        self.dec_hidden = cfg.dec_hidden
        self.init_state = nn.Linear(memory_dim, cfg.dec_hidden) if cfg.init == "mean" else None
        self.cell: nn.GRUCell | None = None
        self.gru: nn.GRU | None = None
        if cfg.query == "previous":
            self.cell = nn.GRUCell(cfg.emb_dim + memory_dim, cfg.dec_hidden)
        else:  # one GRU over the whole target in training, one step of it when decoding
            self.gru = nn.GRU(cfg.emb_dim, cfg.dec_hidden, batch_first=True)
        self.pre_output = nn.Linear(cfg.dec_hidden + memory_dim + cfg.emb_dim, cfg.emb_dim)
        self.output = nn.Linear(cfg.emb_dim, cfg.tgt_vocab)
        self.dropout = nn.Dropout(cfg.dropout)

    def initial_hidden(self, memory: Tensor, src_pad_mask: Tensor) -> Tensor:
        """s_0 = tanh(W mean_j h_j) over real positions, or zeros: (B, S, M) -> (B, D)."""
        if self.init_state is None:
            return memory.new_zeros(memory.shape[0], self.dec_hidden)  # (B, D)
        lengths = (~src_pad_mask).sum(dim=1, keepdim=True).clamp(min=1)  # (B, 1)
        return torch.tanh(self.init_state(memory.sum(dim=1) / lengths))

    def step(
        self, prev_tokens: Tensor, hidden: Tensor, keys: Tensor, memory: Tensor, src_pad_mask: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """prev_tokens (B,), hidden (B, D) -> logits (B, V), new hidden (B, D), weights (B, S)."""
        emb = self.dropout(self.embed(prev_tokens))  # (B, E)
        if self.cell is not None:
            context, weights = self.attention(hidden, keys, memory, src_pad_mask)  # (B, M), (B, S)
            hidden = self.cell(torch.cat([emb, context], dim=-1), hidden)  # (B, D)
        else:
            assert self.gru is not None
            hidden = self.gru(emb.unsqueeze(1), hidden.unsqueeze(0))[1].squeeze(0)  # (B, D)
            context, weights = self.attention(hidden, keys, memory, src_pad_mask)  # (B, M), (B, S)
        return self.readout(hidden, context, emb), hidden, weights

    def readout(self, hidden: Tensor, context: Tensor, emb: Tensor) -> Tensor:
        """[s_i; c_i; y_{i-1}] (..., D + M + E) -> logits (..., V)."""
        features = torch.tanh(self.pre_output(torch.cat([hidden, context, emb], dim=-1)))  # (..., E)
        return self.output(self.dropout(features))

    def teacher_forced(
        self, tgt_in: Tensor, hidden: Tensor, keys: Tensor, memory: Tensor, src_pad_mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Luong's layout over a whole target at once: tgt_in (B, T) -> logits (B, T, V), weights (B, T, S)."""
        assert self.gru is not None
        B, T = tgt_in.shape
        emb = self.dropout(self.embed(tgt_in))  # (B, T, E)
        states, _ = self.gru(emb, hidden.unsqueeze(0))  # (B, T, D)
        S = keys.shape[1]

        def per_step(x: Tensor) -> Tensor:  # (B, S, ...) -> (B·T, S, ...): every step sees its sentence
            return x.unsqueeze(1).expand(B, T, *x.shape[1:]).reshape(B * T, S, *x.shape[2:])

        context, weights = self.attention(
            states.reshape(B * T, -1), per_step(keys), per_step(memory), per_step(src_pad_mask)
        )  # (B·T, M), (B·T, S)
        logits = self.readout(states, context.view(B, T, -1), emb)  # (B, T, V)
        return logits, weights.view(B, T, S)


class RNNSeq2Seq(nn.Module):
    """The tutorial's model: bi-GRU encoder, GRU decoder, attention of the configured score."""

    def __init__(self, cfg: RNNConfig) -> None:
        super().__init__()
        self.config = cfg
        self.encoder = GRUEncoder(cfg)
        self.decoder = GRUDecoder(cfg)

    def encode(self, src_ids: Tensor, src_pad_mask: Tensor) -> Encoded:
        memory = self.encoder(src_ids, src_pad_mask)  # (B, S, M)
        keys = self.decoder.attention.precompute_keys(memory)  # (B, S, A)
        hidden = self.decoder.initial_hidden(memory, src_pad_mask)  # (B, D)
        return Encoded(statics={"memory": memory, "keys": keys}, state={"hidden": hidden})

    def decode_step(
        self, prev_tokens: Tensor, statics: dict[str, Tensor], src_pad_mask: Tensor, state: dict[str, Tensor]
    ) -> StepOutput:
        logits, hidden, weights = self.decoder.step(
            prev_tokens, state["hidden"], statics["keys"], statics["memory"], src_pad_mask
        )
        return StepOutput(
            log_probs=F.log_softmax(logits, dim=-1),  # (B, V)
            cross_attention=weights[:, None, None, :],  # (B, 1, 1, S)
            state={"hidden": hidden},
        )

    def forward(self, src_ids: Tensor, src_pad_mask: Tensor, tgt_in: Tensor) -> ForwardOutput:
        """Teacher forcing: tgt_in (B, T) starts with BOS -> logits (B, T, V)."""
        enc = self.encode(src_ids, src_pad_mask)
        keys, memory, hidden = enc.statics["keys"], enc.statics["memory"], enc.state["hidden"]
        if self.decoder.gru is not None:
            all_logits, all_weights = self.decoder.teacher_forced(tgt_in, hidden, keys, memory, src_pad_mask)
            return ForwardOutput(logits=all_logits, cross_attention=all_weights[:, None, None])  # (B, 1, 1, T, S)
        logits, weights = [], []
        for t in range(tgt_in.shape[1]):
            step_logits, hidden, step_weights = self.decoder.step(tgt_in[:, t], hidden, keys, memory, src_pad_mask)
            logits.append(step_logits)
            weights.append(step_weights)
        return ForwardOutput(
            logits=torch.stack(logits, dim=1),  # (B, T, V)
            cross_attention=torch.stack(weights, dim=1)[:, None, None],  # (B, 1, 1, T, S)
        )
