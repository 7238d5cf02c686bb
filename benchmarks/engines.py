"""The three engines of the side-by-side benchmark behind one call: source ids in, target ids out.

Every engine decodes the same weights: our onnxruntime engine (a bundle exported from the
checkpoint), PyTorch eager (the checkpoint itself, KV-cache incremental decoding through the same
search) and CTranslate2 (the checkpoint converted by `benchmarks.ct2_convert`). Each engine runs in
its own worker process (`benchmarks.worker`), so imports stay apart: the onnxruntime worker never
loads torch, and each worker's peak RSS is its own.

`fixed` = n asks for exactly n generated tokens per sentence with EOS suppressed: the same work in
every engine whatever the model would have said.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from service.engine.search import (
    FloatArray,
    IntArray,
    Scoring,
    StepModel,
    beam_search,
    greedy_search,
    max_output_length,
)

ALPHA = 0.0  # no length penalty: the engines' formulas differ, and raw log-probs mean the same everywhere


@dataclass(frozen=True)
class EngineSpec:
    """Which engine, on which artifact, with which threads: one worker process each."""

    kind: str  # ort | torch | ct2
    precision: str  # fp32 | int8
    artifact: str  # bundle dir (ort), checkpoint file (torch), CTranslate2 model dir (ct2)
    setting: str  # a name for the thread setting, e.g. "intra2", "split2x1", "mkl-intra1"
    intra_threads: int = 1
    inter_threads: int = 1  # ct2 inter_threads; for ort: threads splitting a batch over one session
    env: dict[str, str] = field(default_factory=dict)  # set before the engine's library is imported
    fuse_quantization: bool = True  # ort: int8 row quantizations as the attention_mt operators (quant_fusion.py)
    fuse_attention: bool = True  # ort: the decoder step's attentions as the attention_mt operators
    index_sources: bool = True  # ort: their cross-attentions read each sentence's keys once

    @property
    def label(self) -> str:
        return f"{self.kind}-{self.precision}"


class Engine(Protocol):
    def translate(self, src_ids: list[list[int]], beam: int, fixed: int | None, max_target: int) -> list[list[int]]:
        """Best hypothesis of each source (ids ending in EOS), without EOS."""
        ...


class _NoEos:
    """Wraps a step model so EOS can never win: fixed-length work for the benchmark."""

    def __init__(self, model: StepModel[Any], eos_id: int) -> None:
        self.model, self.eos_id = model, eos_id

    def step(self, tokens: IntArray, state: Any) -> tuple[FloatArray, FloatArray, Any]:
        log_probs, attention, state = self.model.step(tokens, state)
        log_probs[:, self.eos_id] = -np.inf
        return log_probs, attention, state

    def reorder(self, state: Any, rows: IntArray) -> Any:
        return self.model.reorder(state, rows)


def _search(
    model: StepModel[Any],
    state: Any,
    src_ids: list[list[int]],
    beam: int,
    fixed: int | None,
    max_target: int,
    bos: int = 2,
    eos: int = 3,
) -> list[list[int]]:
    """The service's own greedy/beam search, with the benchmark's length rule (our models' special
    ids by default; a converted bundle's come from its manifest)."""
    if fixed is not None:
        model, lengths = _NoEos(model, eos), np.full(len(src_ids), fixed, dtype=np.int64)
    else:
        lengths = np.array([max_output_length(len(s), max_target) for s in src_ids], dtype=np.int64)
    scoring = Scoring(alpha=ALPHA)
    if beam == 1:
        best = greedy_search(model, state, lengths, bos, eos, scoring)
    else:
        best = [nbest[0] for nbest in beam_search(model, state, lengths, bos, eos, beam, 1, scoring)]
    return [[t for t in h.tokens if t != eos] for h in best]


def _split(src_ids: list[list[int]], parts: int) -> list[list[list[int]]]:
    size = -(-len(src_ids) // parts)
    return [src_ids[i : i + size] for i in range(0, len(src_ids), size)]


class SplitThreads:
    """Splits a batch across `threads` threads that live as long as the engine: the calling thread
    decodes the first part, helper threads the others (the runtime lets go of the GIL), as
    CTranslate2's inter_threads are kept. Threads started for each call cost the real sentences'
    short batches: int8 greedy x 32, one helper kept against two threads started a call, paired in
    one process, 1.119x faster (1.002-1.412); fixed length 1.004x."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._helpers = ThreadPoolExecutor(threads - 1, thread_name_prefix="split") if threads > 1 else None

    def __call__(self, src_ids: list[list[int]], call: Any) -> list[list[int]]:
        """`call` on each part; the results in input order."""
        chunks = _split(src_ids, self.threads)
        if len(chunks) == 1 or self._helpers is None:
            return list(call(src_ids))
        others = [self._helpers.submit(call, chunk) for chunk in chunks[1:]]
        first = list(call(chunks[0]))
        return first + [ids for future in others for ids in future.result()]


class OrtEngine:
    """Our engine: the bundle's ONNX graphs on onnxruntime, exactly as the service runs them."""

    def __init__(self, spec: EngineSpec) -> None:
        from service.engine.bundle import load_bundle  # noqa: PLC0415
        from service.engine.onnx_model import OnnxSeq2Seq, SessionConfig  # noqa: PLC0415

        bundle = load_bundle(Path(spec.artifact))
        # several threads: the encoder's and decoder's on one pool, as the service has them when they spin
        shared = spec.intra_threads != 1 and spec.inter_threads == 1
        config = SessionConfig(
            intra_op_threads=spec.intra_threads,
            inter_op_threads=1,
            shared_thread_pool=shared,
            fuse_quantization=spec.fuse_quantization,
            fuse_attention=spec.fuse_attention,
            index_sources=spec.index_sources,
        )
        # several threads splitting a batch run one session: onnxruntime takes concurrent calls on a
        # session, each on its caller's thread at one intra-op thread, and the threads share one copy
        # of the weights, as CTranslate2's inter_threads do. Two sessions ran as fast and held two
        # copies (OPUS-MT size, beam 4 x 32, fp32: 1.94-2.03 against 1.95-1.96 s a batch, peak RSS
        # 702-712 against 1,044-1,072 MB; int8 0.92-0.98 against 0.91-0.92 s, 441-443 against 555-557)
        self.model, self.split = OnnxSeq2Seq(bundle, config), SplitThreads(spec.inter_threads)
        self.bos, self.eos = bundle.manifest.special_ids.bos, bundle.manifest.special_ids.eos

    def translate(self, src_ids: list[list[int]], beam: int, fixed: int | None, max_target: int) -> list[list[int]]:
        from service.engine.translator import pad_ids  # noqa: PLC0415

        def one(chunk: list[list[int]]) -> list[list[int]]:
            ids, mask = pad_ids(chunk)  # (B, S)
            state = self.model.encode(ids, mask)
            return _search(self.model, state, chunk, beam, fixed, max_target, self.bos, self.eos)

        return self.split(src_ids, one)


class TorchEngine:
    """PyTorch eager on the checkpoint: incremental decoding with the KV cache, the same search."""

    def __init__(self, spec: EngineSpec) -> None:
        import torch  # noqa: PLC0415

        from models.checkpoint import load_checkpoint  # noqa: PLC0415

        torch.set_num_threads(spec.intra_threads)
        model = load_checkpoint(spec.artifact).model.eval()
        if spec.precision == "int8":
            model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)  # type: ignore[no-untyped-call]
        self.model, self.torch = model, torch

    def translate(self, src_ids: list[list[int]], beam: int, fixed: int | None, max_target: int) -> list[list[int]]:
        from models.batching import pad  # noqa: PLC0415
        from models.decoding import TorchState, TorchStepModel  # noqa: PLC0415

        with self.torch.inference_mode():
            ids, mask = pad(src_ids)  # (B, S)
            enc = self.model.encode(ids, mask)
            state = TorchState(enc.statics, mask, enc.state)
            return _search(TorchStepModel(self.model), state, src_ids, beam, fixed, max_target)


class Ct2Engine:
    """CTranslate2 on the converted checkpoint (its own C++ search)."""

    def __init__(self, spec: EngineSpec) -> None:
        os.environ.update(spec.env)  # CT2_USE_MKL is read when the library loads
        import ctranslate2  # type: ignore[import-untyped]  # noqa: PLC0415

        from benchmarks.ct2_convert import ids_to_tokens, read_vocabularies, tokens_to_ids  # noqa: PLC0415

        compute_type = "int8" if spec.precision == "int8" else "float32"
        self.translator = ctranslate2.Translator(
            spec.artifact,
            device="cpu",
            compute_type=compute_type,
            intra_threads=spec.intra_threads,
            inter_threads=spec.inter_threads,
        )
        self.inter = spec.inter_threads
        self.to_tokens, self.to_ids = ids_to_tokens, tokens_to_ids
        source, target = read_vocabularies(Path(spec.artifact))
        self.source_vocab, self.target_index = source, {t: i for i, t in enumerate(target)}

    def translate(self, src_ids: list[list[int]], beam: int, fixed: int | None, max_target: int) -> list[list[int]]:
        source = [self.to_tokens(ids, self.source_vocab) for ids in src_ids]
        # min_decoding_length=0: CTranslate2's default of 1 masks EOS before the softmax at step 0, which
        # changes scores; its max is one value per batch (ours is per sentence: the longest is used)
        lengths: dict[str, Any] = (
            {"min_decoding_length": fixed, "max_decoding_length": fixed}
            if fixed is not None
            else {
                "min_decoding_length": 0,
                "max_decoding_length": max(max_output_length(len(s), max_target) for s in src_ids),
            }
        )
        results = self.translator.translate_batch(
            source,
            beam_size=beam,
            length_penalty=ALPHA,
            max_batch_size=-(-len(source) // self.inter),
            **lengths,
        )
        return [self.to_ids(r.hypotheses[0], self.target_index) for r in results]


def load_engine(spec: EngineSpec) -> Engine:
    engines: dict[str, type[OrtEngine] | type[TorchEngine] | type[Ct2Engine]] = {
        "ort": OrtEngine,
        "torch": TorchEngine,
        "ct2": Ct2Engine,
    }
    return engines[spec.kind](spec)
