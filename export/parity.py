"""Parity of the exported graphs with PyTorch, in three tiers.

1. outputs: every graph output close to PyTorch's on the same inputs (max abs diff per output),
   the decoder fed PyTorch's own state at each step so errors cannot compound;
2. token ids: greedy decoding of the same sources gives identical ids;
3. strings: and identical detokenized strings.
Both sides decode with the same search, so only the model computation can differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from export.graph_io import FamilyIO
from export.onnx_graphs import DecoderGraph, EncoderGraph, initial_state
from models.batching import pad
from models.decoding import translate_ids
from models.registry import Seq2Seq
from service.engine.manifest import CACHE_AXIS, POSITIONS, Parity, StateSpec
from service.engine.onnx_model import OnnxSeq2Seq, OnnxState, write_slots
from service.engine.search import best_in_length_order
from service.engine.tokenizer import BOS_ID, Tokenizer
from service.engine.translator import Translator

LOG_PROB_TOL, ATTENTION_TOL, OTHER_TOL = 1e-4, 1e-5, 1e-4
TIER1_STEPS = 6


def tolerance(output: str) -> float:
    if output.endswith("log_probs"):
        return LOG_PROB_TOL
    if output.endswith("attention"):
        return ATTENTION_TOL
    return OTHER_TOL


@dataclass
class ParityReport:
    max_abs_diff: dict[str, float] = field(default_factory=dict)
    sentences: int = 0
    ids_identical: int = 0
    strings_identical: int = 0
    mismatches: list[str] = field(default_factory=list)  # first few examples, for the error

    def failures(self) -> list[str]:
        problems = [
            f"tier 1: {name} differs by {diff:.2e} (tolerance {tolerance(name):.0e})"
            for name, diff in self.max_abs_diff.items()
            if not diff <= tolerance(name)  # NaN fails too
        ]
        if self.ids_identical < self.sentences:
            problems.append(
                f"tier 2: greedy ids differ on {self.sentences - self.ids_identical}/{self.sentences} sentences"
            )
        if self.strings_identical < self.sentences:
            problems.append(
                f"tier 3: strings differ on {self.sentences - self.strings_identical}/{self.sentences} sentences"
            )
        return problems + self.mismatches[:3]

    def record(self) -> Parity:
        n = max(self.sentences, 1)
        return Parity(
            max_abs_diff={k: float(v) for k, v in self.max_abs_diff.items()},
            tolerances={k: tolerance(k) for k in self.max_abs_diff},
            sentences=self.sentences,
            token_ids_identical=self.ids_identical / n,
            strings_identical=self.strings_identical / n,
            passed=not self.failures(),
        )


def _diff(a: np.ndarray, b: torch.Tensor) -> float:
    return float(np.abs(a.astype(np.float64) - b.numpy().astype(np.float64)).max()) if a.size else 0.0


@torch.inference_mode()
def tier1_outputs(model: Seq2Seq, io: FamilyIO, onnx_model: OnnxSeq2Seq, src_ids: list[list[int]]) -> dict[str, float]:
    """Max abs diff of every encoder and decoder output over a batch and a few greedy steps."""
    model.eval()
    ids, mask = pad(src_ids)  # (B, S)
    diffs: dict[str, float] = {}
    enc_torch = EncoderGraph(model, io)(ids, mask)
    enc_onnx = onnx_model.encoder.run(None, {"src_ids": ids.numpy(), "src_pad_mask": mask.numpy()})
    for spec, a, b in zip(io.encoder.outputs, enc_onnx, enc_torch, strict=True):
        diffs[f"encoder.{spec.name}"] = _diff(a, b)
    torch_enc = dict(zip((t.name for t in io.encoder.outputs), enc_torch, strict=True))
    statics = [torch_enc[name] for name in io.statics]
    state = initial_state(model, io, ids, mask, slots=TIER1_STEPS)
    tokens = torch.full((len(src_ids),), BOS_ID, dtype=torch.long)
    decoder = DecoderGraph(model, io)
    for _ in range(TIER1_STEPS):
        out_torch = decoder(tokens, mask, *statics, *state)
        feeds = OnnxState(
            mask.numpy(),
            {n: s.numpy() for n, s in zip(io.statics, statics, strict=True)},
            {s.input: x.numpy().copy() for s, x in zip(io.state, state, strict=True)},  # a cache is written in place
        )
        out_onnx, _ = onnx_model.run_step(tokens.numpy(), feeds)  # fed PyTorch's state: no compounding
        for spec, b in zip(io.decoder.outputs, out_torch, strict=True):
            key = f"decoder.{spec.name}"
            diffs[key] = max(diffs.get(key, 0.0), _diff(out_onnx[spec.name], b))
        named = dict(zip((t.name for t in io.decoder.outputs), out_torch, strict=True))
        tokens = named["log_probs"].argmax(-1)
        state = [_next(s, x, named[s.output], feeds, io) for s, x in zip(io.state, state, strict=True)]
    return diffs


def _next(spec: StateSpec, before: torch.Tensor, output: torch.Tensor, feeds: OnnxState, io: FamilyIO) -> torch.Tensor:
    """PyTorch's state for the next step: its output, or its cache with the step's entry written."""
    if spec.write != "slot":
        return output
    cache = before.clone()
    slot_axis = io.decoder.input(spec.input).shape.index(CACHE_AXIS)
    write_slots(cache.numpy(), feeds.state[POSITIONS], output.numpy(), spec.batch_axis, slot_axis)
    return cache


def greedy_ids(
    translator: Translator, src_ids: list[list[int]], batch_size: int = 32, max_output_tokens: int | None = None
) -> list[list[int]]:
    """Greedy ids from an ONNX translator, in input order, in length-sorted batches."""
    greedy = translator.options(beam_size=1, max_output_tokens=max_output_tokens)
    return [h.tokens for h in best_in_length_order(lambda c: translator.search_ids(c, greedy), src_ids, batch_size)]


def torch_greedy_ids(model: Seq2Seq, src_ids: list[list[int]], max_tgt: int, batch_size: int = 32) -> list[list[int]]:
    best = best_in_length_order(lambda c: translate_ids(model, c, max_tgt, beam_size=1), src_ids, batch_size)
    return [h.tokens for h in best]


def check_parity(
    model: Seq2Seq, io: FamilyIO, translator: Translator, src_ids: list[list[int]], tgt_tokenizer: Tokenizer
) -> ParityReport:
    """Run the three tiers on `src_ids` (each ending in EOS)."""
    model.eval()  # dropout off: PyTorch must compute what the exported graphs compute
    report = ParityReport()
    report.max_abs_diff = tier1_outputs(model, io, translator.model, src_ids[:16])
    torch_ids = torch_greedy_ids(model, src_ids, translator.manifest.limits.max_target_tokens)
    onnx_ids = greedy_ids(translator, src_ids)
    report.sentences = len(src_ids)
    for i, (a, b) in enumerate(zip(torch_ids, onnx_ids, strict=True)):
        text_a, text_b = tgt_tokenizer.decode_text(a), tgt_tokenizer.decode_text(b)
        report.ids_identical += a == b
        report.strings_identical += text_a == text_b
        if a != b and len(report.mismatches) < 3:
            report.mismatches.append(f"sentence {i}: torch {text_a!r} vs onnx {text_b!r}")
    return report
