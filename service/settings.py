"""The service's settings: one frozen object, read from MT_* environment variables at startup and
passed down explicitly (never imported as a global)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, PositiveInt
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_BUNDLES = Path(__file__).resolve().parents[1] / "bundles"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MT_", frozen=True, extra="forbid")

    # models and runtime
    bundles: Path = Field(DEFAULT_BUNDLES, description="directory holding one bundle per subdirectory")
    provider: Literal["cpu", "cuda", "auto"] = "cpu"
    intra_op_threads: int = Field(
        1,
        ge=0,
        description="onnxruntime intra-op threads (0: one per core). One leaves the other cores to the HTTP "
        "server: on 2 cores a second engine thread served fewer requests, not more (docs/benchmarks.md)",
    )
    inter_op_threads: int = Field(0, ge=0)
    intra_op_spinning: bool = Field(
        False, description="onnxruntime's idle threads spin for work (off: they yield the cores to the HTTP server)"
    )
    enable_mem_arena: bool = True
    fuse_quantization: bool = Field(
        True,
        description="run an int8 graph's per-row quantizations as two operators of the package's own "
        "(service/engine/_ortops.c), bit for bit the same results: 1.03-1.16x a decoder step. Needs the "
        "built library; without it the graph runs as written",
    )
    fuse_attention: bool = Field(
        True,
        description="run a decoder step's attentions (one per layer over the cache, one over the source) as "
        "operators of the package's own (service/engine/ortops_attention.c): the graph's results to rounding, "
        "batch-invariant. Needs the built library; without it the graph runs as written",
    )
    heap_reuse_bytes: int = Field(
        32 << 20,
        ge=0,
        le=32 << 20,
        description="allocations under this many bytes (a decoder step's arrays: log-probs, caches, beams' rows) "
        "come from a heap that keeps what is freed for the next step, instead of fresh pages for each: 1,409 "
        "page faults a call at greedy x 16 went to 2, at the same peak RSS (service/engine/heap.py). "
        "0: glibc's own policy. glibc only; at most 32 MiB",
    )
    enable_mem_pattern: bool | None = Field(
        None,
        description="onnxruntime's memory pattern (one planned block per input shape). Unset: on, except for an "
        "output vocabulary of 32,768 or more (OPUS-MT's 65,001), where each shape's block grows the arena: "
        "beam 4 x 32 peaked 110 MB lower without it, at the same speed; the shipped models' batch 1 is 5-8% "
        "slower without it",
    )
    gc_freeze: bool = Field(
        True,
        description="`serve` freezes the objects startup built (gc.freeze) once the models are warm: the "
        "collector never scans them again",
    )
    gc_thresholds: tuple[PositiveInt, PositiveInt, PositiveInt] = Field(
        (10_000, 50, 100), description="`serve`'s gc.set_threshold; [700, 10, 10] is Python's own"
    )

    # dynamic batching
    batching: bool = True
    max_batch_size: int = Field(32, ge=1, description="texts decoded together at most")
    max_cohorts: int = Field(
        4,
        ge=1,
        le=64,
        description="batches decoding at once, one step each in turn: one per model, as new texts join it; "
        "more for models whose decoder cannot take texts mid-decode (bundles from before continuous batching)",
    )
    max_queue_delay_ms: float = Field(
        0.0, ge=0, description="extra wait for company before a batch starts when none is running"
    )
    join_delay_ms: float = Field(
        5.0,
        ge=0,
        description="while a batch runs, how long new texts may wait for company before they are encoded and join "
        "it (the batch's steps go on meanwhile); 0: they join at the next step",
    )
    beam_join_delay_ms: float = Field(
        40.0,
        ge=0,
        description="the same for texts decoded by beam search, whose joins cost more: at beam 4 under 16 clients "
        "40 ms served 1.26x the requests of 5 ms, with a lower p50 and p99; a text never waits longer than the "
        "running batch lasts",
    )
    express_tokens: int = Field(
        0,
        ge=0,
        description="a text of at most this many source tokens (8: a few words), among texts decoding at least twice "
        "as long, is decoded first, apart and to its end, before the running batch's next step. Beside 16 clients of "
        "news sentences a short text's p50 / p99 fell 19-21 / 30-32 -> 6-7 / 13-14 ms over HTTP; the news clients "
        "served 3% less with one short text every 50 ms, 35% less with short texts sent back to back (each is "
        "decoded with little batching). 0: off, every text joins the batch",
    )
    max_queue: int = Field(
        256, ge=1, description="sentences waiting at most; more get 503 + Retry-After (and one request never more)"
    )
    retry_after_s: int = Field(1, ge=1)

    # request limits
    max_texts: int = Field(32, ge=1, description="texts per request")
    max_chars: int = Field(4000, ge=1, description="characters per text (a paragraph; it is cut into sentences)")
    max_body_bytes: int = Field(256 * 1024, ge=1024)
    max_header_bytes: int = Field(
        16 * 1024, ge=1024, description="request header bytes (names and values) at most; more get 431"
    )
    max_beam_size: int = Field(8, ge=1)
    default_beam_size: int | None = Field(
        None, ge=1, description="None: each bundle's own (manifest search.beam_size: 4 here, num_beams if converted)"
    )
    length_penalty: float | None = Field(
        None, ge=0, description="length penalty exponent for every bundle; None: each bundle's own"
    )
    max_attention_cells: int = Field(1_000_000, ge=1, description="floats of attention in one response at most")

    # signals
    unattended_threshold: float | None = Field(
        None,
        ge=0,
        description="coverage under which a source word is flagged; unset: each bundle's measured threshold (0.2 "
        "for bundles without one)",
    )

    # deadlines, exposure
    request_timeout_s: float = Field(
        30.0, gt=0, description="deadline of a request; a body's timeout_ms is capped by it"
    )
    cors_origins: tuple[str, ...] = Field((), description='origins allowed by CORS, e.g. ["https://app.example"]')
    docs: bool = Field(True, description="serve /docs, /redoc and /openapi.json")
    api_keys: tuple[str, ...] = Field((), description="X-API-Key values accepted; empty: no auth. JSON list in env")
    rate_limit_per_minute: int = Field(0, ge=0, description="requests per minute per API key (0: no limit)")

    # serving
    drain_settle_s: float = Field(
        3.0, ge=0, description="after SIGTERM, keep accepting this long (readyz 503) so load balancers stop sending"
    )
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="server processes sharing the port, each with its own models and engine (and its own "
        "interpreter lock): on 2 cores two served +19% greedy and +40% beam 4 under load, at twice the memory",
    )
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    warmup_text: str = "Hello."
    check_batch_invariance: bool = Field(
        True,
        description="at startup, translate a few texts made from warmup_text alone and in one batch, and "
        "report whether this CPU's kernels keep each model batch-invariant (/v1/models, /metrics, the log)",
    )
