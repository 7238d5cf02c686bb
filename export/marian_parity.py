"""Parity of a converted bundle with transformers itself, in three tiers and an attention check.

0. tokenization: our torch-free tokenizer gives transformers' MarianTokenizer's ids;
1. per-step log-probs: transformers' logits (log-softmaxed) against the decoder graph's, both
   teacher-forced on transformers' greedy output, within 1e-4; the cross-attention rows against
   transformers' `cross_attentions` (eager attention) within 1e-4 (on the first 16 sentences);
2. greedy ids: `generate(num_beams=1)` against our engine's greedy search: identical;
3. beam texts: `generate(num_beams=4)` decoded by transformers against our engine's beam 4
   decoded by our tokenizer: identical strings.
Both sides decode under the same maximum length, so a model that never stops is compared too.

Legend: B sentences, S source length, T target length, V vocabulary, L layers, N heads.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from importlib import metadata

import numpy as np
import numpy.typing as npt
import torch
from transformers import MarianMTModel, MarianTokenizer

from service.engine.manifest import Parity
from service.engine.onnx_model import OnnxState
from service.engine.search import best_in_length_order
from service.engine.text import normalize
from service.engine.translator import Translator, pad_ids

LOG_PROB_TOL = ATTENTION_TOL = 1e-4
BEAM = 4
TIER1_SENTENCES = 16  # tier 1 compares whole (T, V) log-prob rows: a subset is plenty, and a big vocabulary costs


@dataclass
class ReferenceParity:
    sentences: int = 0
    max_output_tokens: int = 0
    log_prob_diff: float = 0.0
    attention_diff: float = 0.0
    source_ids_identical: int = 0
    greedy_ids_identical: int = 0
    greedy_strings_identical: int = 0
    beam_strings_identical: int = 0
    mismatches: list[str] = field(default_factory=list)

    def failures(self) -> list[str]:
        n, problems = self.sentences, []
        if not self.log_prob_diff <= LOG_PROB_TOL:  # NaN fails too
            problems.append(f"tier 1: log-probs differ from transformers' by {self.log_prob_diff:.2e}")
        if not self.attention_diff <= ATTENTION_TOL:
            problems.append(f"tier 1: cross-attention differs from transformers' by {self.attention_diff:.2e}")
        for tier, count in (
            ("tokenization: source ids", self.source_ids_identical),
            ("tier 2: greedy ids", self.greedy_ids_identical),
            (f"tier 3: beam-{BEAM} texts", self.beam_strings_identical),
        ):
            if count < n:
                problems.append(f"{tier} differ on {n - count}/{n} sentences")
        return problems + self.mismatches[:3]

    def record(self) -> Parity:
        n = max(self.sentences, 1)
        return Parity(
            max_abs_diff={"decoder.log_probs": self.log_prob_diff, "decoder.cross_attention": self.attention_diff},
            tolerances={"decoder.log_probs": LOG_PROB_TOL, "decoder.cross_attention": ATTENTION_TOL},
            sentences=self.sentences,
            token_ids_identical=self.greedy_ids_identical / n,
            strings_identical=self.greedy_strings_identical / n,
            passed=not self.failures(),
            reference=f"transformers {metadata.version('transformers')}",
            max_output_tokens=self.max_output_tokens,
            beam_size=BEAM,
            beam_strings_identical=self.beam_strings_identical / n,
            source_ids_identical=self.source_ids_identical / n,
        )


def reference_tokenizer(directory: str, target_token: str | None) -> tuple[MarianTokenizer, str]:
    """transformers' tokenizer of the checkpoint, and the prefix its sources get (the target token)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Recommended: pip install sacremoses", unused by Marian's tokenization
        tokenizer = MarianTokenizer.from_pretrained(directory, local_files_only=True)
    return tokenizer, f"{target_token} " if target_token else ""


def _padded(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids, mask = pad_ids(rows, pad)  # (B, S)
    return torch.from_numpy(ids), torch.from_numpy(~mask).long()


def _generated(sequences: torch.Tensor, eos: int) -> list[list[int]]:
    """generate()'s rows without the start token, cut after the first EOS."""
    out = []
    for row in sequences[:, 1:].tolist():
        out.append(row[: row.index(eos) + 1] if eos in row else row)
    return out


def _teacher_forced(
    reference: MarianMTModel, translator: Translator, src: list[list[int]], tgt: list[list[int]], chunk: int = 8
) -> tuple[float, float]:
    """Max abs diff of the per-step log-probs and cross-attention, both sides fed the same targets
    (in chunks of sentences: a big vocabulary's (B, T, V) log-probs are large)."""
    diffs = [
        _teacher_forced_chunk(reference, translator, src[i : i + chunk], tgt[i : i + chunk])
        for i in range(0, len(src), chunk)
    ]
    return max(d[0] for d in diffs), max(d[1] for d in diffs)


@torch.inference_mode()
def _teacher_forced_chunk(
    reference: MarianMTModel, translator: Translator, src: list[list[int]], tgt: list[list[int]]
) -> tuple[float, float]:
    special = translator.manifest.special_ids
    input_ids, attention_mask = _padded(src, special.pad)  # (B, S)
    decoder_in = [[special.bos, *t[:-1]] for t in tgt]
    decoder_ids, _ = _padded(decoder_in, special.pad)  # (B, T)
    out = reference(input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_ids, output_attentions=True)
    ref_log_probs = torch.log_softmax(out.logits.float(), dim=-1).numpy()  # (B, T, V)
    ref_cross = torch.stack(out.cross_attentions, dim=1).numpy()  # (B, L, N, T, S)
    ids, mask = pad_ids(src, special.pad)
    state: OnnxState = translator.model.encode(ids, mask)
    lengths = np.array([len(t) for t in tgt])
    log_prob_diff = attention_diff = 0.0
    for t in range(decoder_ids.shape[1]):
        outputs, state = translator.model.run_step(decoder_ids[:, t].numpy(), state)
        live = lengths > t  # (B,) rows still inside their target
        ours_lp: npt.NDArray[np.float32] = outputs["log_probs"][live]
        log_prob_diff = max(log_prob_diff, float(np.abs(ours_lp - ref_log_probs[live, t]).max()))
        ours_cross = outputs["cross_attention"][live, ..., : ids.shape[1]]  # (B', L, N, S): encode pads the source
        attention_diff = max(attention_diff, float(np.abs(ours_cross - ref_cross[live, :, :, t]).max()))
    return log_prob_diff, attention_diff


def _ours(translator: Translator, src: list[list[int]], beam: int, max_output_tokens: int) -> list[list[int]]:
    options = translator.options(beam_size=beam, max_output_tokens=max_output_tokens)
    best = best_in_length_order(lambda chunk: translator.search_ids(chunk, options), src, 32)
    return [h.tokens for h in best]


@torch.inference_mode()
def _theirs(reference: MarianMTModel, src: list[list[int]], pad: int, beam: int, max_length: int) -> torch.Tensor:
    input_ids, attention_mask = _padded(src, pad)
    return reference.generate(
        input_ids, attention_mask=attention_mask, num_beams=beam, do_sample=False, max_length=max_length
    )


def check_reference_parity(
    reference: MarianMTModel,
    tokenizer: MarianTokenizer,
    prefix: str,
    translator: Translator,
    sources: list[str],
    max_output_tokens: int,
) -> ReferenceParity:
    """Run the tiers on `sources`; each side decodes at most `max_output_tokens` tokens (EOS included)."""
    special = translator.manifest.special_ids
    texts = [normalize(s) for s in sources]
    src = translator.source_ids(texts)
    report = ReferenceParity(sentences=len(sources), max_output_tokens=max_output_tokens)
    theirs_src = [tokenizer(prefix + text)["input_ids"] for text in texts]
    report.source_ids_identical = sum(a == b for a, b in zip(src, theirs_src, strict=True))
    for i, (a, b) in enumerate(zip(src, theirs_src, strict=True)):
        if a != b and len(report.mismatches) < 3:
            report.mismatches.append(f"sentence {i}: our source ids {a} vs transformers' {b}")
    max_length = max_output_tokens + 1  # transformers counts the start token
    greedy_theirs = _generated(_theirs(reference, src, special.pad, 1, max_length), special.eos)
    tier1 = slice(0, TIER1_SENTENCES)
    report.log_prob_diff, report.attention_diff = _teacher_forced(
        reference, translator, src[tier1], greedy_theirs[tier1]
    )
    greedy_ours = _ours(translator, src, 1, max_output_tokens)
    beam_theirs = tokenizer.batch_decode(
        _theirs(reference, src, special.pad, BEAM, max_length), skip_special_tokens=True
    )
    beam_ours = [translator.tgt_tokenizer.decode_text(t) for t in _ours(translator, src, BEAM, max_output_tokens)]
    decode = translator.tgt_tokenizer.decode_text
    for i, (a, b) in enumerate(zip(greedy_ours, greedy_theirs, strict=True)):
        report.greedy_ids_identical += a == b
        report.greedy_strings_identical += decode(a) == tokenizer.decode(b, skip_special_tokens=True)
        if a != b and len(report.mismatches) < 3:
            report.mismatches.append(f"sentence {i} greedy: ours {decode(a)!r} vs transformers' {decode(b)!r}")
    for i, (a_text, b_text) in enumerate(zip(beam_ours, beam_theirs, strict=True)):
        report.beam_strings_identical += a_text == b_text
        if a_text != b_text and len(report.mismatches) < 3:
            report.mismatches.append(f"sentence {i} beam {BEAM}: ours {a_text!r} vs transformers' {b_text!r}")
    return report
