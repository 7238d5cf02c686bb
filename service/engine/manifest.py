"""The bundle manifest: the one contract between export (writer) and the service (reader).

A strict pydantic schema (unknown fields rejected, no coercion), shared by both sides so they can
never disagree on a field. `graphs` declares every input and output of the two ONNX graphs with
symbolic dims; `state` says how decoder state is initialised and carried between steps.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SCHEMA_VERSION = 1
MANIFEST_FILE = "manifest.json"
Dim = int | str  # a fixed size, or a symbolic name: batch, src_len, cache_len (past_len, present_len before)

# The names the graphs and the engine agree on (export/graph_io.py writes them).
SOURCE_AXIS = "src_len"  # the source axis, which batching pads
CACHE_AXIS = "cache_len"  # a KV cache's slot axis: each row writes at its own position
POSITIONS = "positions"  # the decoder state input holding each row's position
LEGACY_CACHE_AXIS = "past_len"  # a cache that grows by one column a step: every row at the same position
DType = Literal["int64", "float32", "bool"]
# A language code as the bundle's maker wrote it: "en", "zh", "de", "cmn_Hans", "pt-BR"...
LANGUAGE_CODE = r"^[A-Za-z]{2,3}([_-][A-Za-z0-9]{2,8})*$"
LanguageCode = Annotated[str, Field(pattern=LANGUAGE_CODE)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class TensorSpec(Strict):
    name: str
    dtype: DType
    shape: list[Dim]


class GraphSpec(Strict):
    file: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]

    def input(self, name: str) -> TensorSpec:
        return next(t for t in self.inputs if t.name == name)

    def output(self, name: str) -> TensorSpec:
        return next(t for t in self.outputs if t.name == name)


class Graphs(Strict):
    encoder: GraphSpec
    decoder: GraphSpec


class StateSpec(Strict):
    """One decoder state tensor: fed as `input`, updated from `output`, reordered on `batch_axis`.

    `init` is "encoder:<output name>" (taken from the encoder graph) or "empty" (zeros with every
    symbolic dim but `batch` at 0, e.g. a KV cache with no past)."""

    input: str
    output: str
    batch_axis: int = 0
    init: str
    # "replace": the output is the next step's input. "slot": the output is this step's entry only,
    # without the cache axis, and the runtime writes it into the input at each row's position (a KV
    # cache updated in place: the graph never copies the whole cache)
    write: Literal["replace", "slot"] = "replace"


class Architecture(Strict):
    family: Literal["rnn", "transformer"]
    attention: str  # the RNN's score function, or "multihead_scaled_dot"
    layers: int  # decoder layers reporting cross-attention
    heads: int
    encoder_layers: int
    decoder_layers: int
    parameters: int
    config: dict[str, int | float | str | bool]  # the model's full hyperparameters


class SpecialIds(Strict):
    pad: int
    unk: int
    bos: int
    eos: int


class Limits(Strict):
    max_source_tokens: int = Field(gt=0)  # including the source end-of-sentence token
    max_target_tokens: int = Field(gt=0)  # including the target end-of-sentence token


class Tokenizers(Strict):
    """The tokenizer files. `sentencepiece`: the model's ids are SentencePiece ids (this project's
    own models). `sentencepiece+vocab`: SentencePiece cuts pieces and a JSON vocabulary numbers
    them (Marian / OPUS-MT); `target_token` (e.g. ">>cmn_Hans<<") is put before every source."""

    source: str
    target: str
    kind: Literal["sentencepiece", "sentencepiece+vocab"] = "sentencepiece"
    source_vocab: str | None = None
    target_vocab: str | None = None
    target_token: str | None = None

    @model_validator(mode="after")
    def _vocabularies_match_the_kind(self) -> Tokenizers:
        with_vocab = self.source_vocab is not None and self.target_vocab is not None
        if (self.kind == "sentencepiece+vocab") != with_vocab:
            raise ValueError("source_vocab and target_vocab are given exactly when kind is sentencepiece+vocab")
        if self.target_token is not None and self.kind == "sentencepiece":
            raise ValueError("target_token needs kind sentencepiece+vocab")
        return self

    def files(self) -> set[str]:
        return {name for name in (self.source, self.target, self.source_vocab, self.target_vocab) if name}


class SearchDefaults(Strict):
    """How the bundle's model is decoded unless a request says otherwise.

    This project's own models score with GNMT's length penalty ((5 + |Y|) / 6) ** alpha, a coverage
    penalty, and stop a sentence when its best candidate ends; converted Hugging Face models keep
    transformers' rules (|Y| ** alpha, its early-stopping heuristic, forced EOS at the maximum
    length, bad words, renormalised log-probs), so they translate exactly as `generate` does."""

    beam_size: int = Field(4, ge=1)
    length_penalty: Literal["gnmt", "power"] = "gnmt"
    alpha: float = 0.6
    coverage_penalty: float = Field(0.2, ge=0)
    stopping: Literal["best_finished", "transformers"] = "best_finished"
    max_output_tokens: int | None = Field(None, gt=0)  # None: the model's limit; EOS included
    # and each output at most ratio x its source + slack tokens (None: no cap relative to the source)
    max_output_ratio: float | None = Field(2.0, gt=0)
    max_output_slack: int = Field(10, ge=0)
    no_repeat_ngram: int = Field(0, ge=0)  # no n-gram of this size twice in an output (0: off)
    repetition_penalty: float = Field(1.0, ge=1.0)  # on tokens already written (1.0: off)
    forced_eos: bool = False  # the last token allowed is EOS (transformers' forced_eos_token_id)
    suppressed_ids: list[int] | None = None  # never generated; None: pad and bos
    renormalize: bool = False  # log-softmax again after suppressing (transformers' renormalize_logits)
    # a request's `rerank`: the weight of the opposite direction's score (benchmarks.channel_rerank
    # chooses it on dev: 1.5 for zh-en, 2.0 for en-zh)
    rerank_weight: float = Field(1.5, ge=0)


class RowIds(Strict):
    """The graph input whose ids alone index a table, in each graph (`src_ids`, `prev_tokens`)."""

    encoder: str
    decoder: str


class SharedWeight(Strict):
    """A weight both graphs hold (a tied embedding), stored once: `length` bytes at `offset` of `file`,
    where each graph's initializer points (ONNX external data). The service gives both sessions one
    buffer (export/shared_weights.py writes these). With `by_row`, the table is also an input of each
    graph that overrides the initializer: the service reads from the file only the rows a call's ids
    use, feeds those, and feeds the ids renumbered to match, so a worker never holds the table.
    A reader that feeds nothing gets the whole table from the file, as without it."""

    file: str
    offset: int = Field(ge=0)
    length: int = Field(gt=0)
    dtype: Literal["float32", "uint8", "int8"]
    shape: list[Annotated[int, Field(ge=0)]]
    encoder: str  # the initializer's name in each graph
    decoder: str
    by_row: RowIds | None = None

    @model_validator(mode="after")
    def _length_fits_the_shape(self) -> SharedWeight:
        itemsize = 4 if self.dtype == "float32" else 1
        if self.length != math.prod(self.shape) * itemsize:
            raise ValueError(f"length {self.length} is not {self.dtype} {self.shape}")
        return self


class FileEntry(Strict):
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)


class Parity(Strict):
    """Export-time checks of the ONNX graphs against PyTorch."""

    max_abs_diff: dict[str, float]  # per graph output, e.g. "decoder.log_probs"
    tolerances: dict[str, float]
    sentences: int  # decoded greedily by both
    token_ids_identical: float  # share of sentences with identical greedy ids
    strings_identical: float  # share with identical detokenized strings
    passed: bool
    reference: str = "pytorch"  # what the graphs were checked against, e.g. "transformers 5.24.0"
    max_output_tokens: int | None = None  # the cap both sides decoded under
    beam_size: int | None = None  # beam search compared too (converted models)
    beam_strings_identical: float | None = None
    source_ids_identical: float | None = None  # the reference's own tokenizer gave the same ids


class Quantization(Strict):
    mode: Literal["none", "int8"]
    method: str | None = None
    token_agreement: float | None = None  # share of dev sentences with ids identical to fp32
    bleu_fp32: float | None = None
    bleu_int8: float | None = None
    bleu_delta: float | None = None
    bleu_reference: Literal["references", "fp32_output"] = "references"  # what bleu_int8 was scored against
    speedup: float | None = None  # fp32 time / int8 time, same sentences, same run
    size_fp32: int | None = None
    size_int8: int | None = None
    # checked at export: sentences decoded alone and in one mixed batch (greedy and beam 4) gave the
    # same tokens and scores; None: not checked (bundles from before the check)
    batch_invariant: bool | None = None


class Score(Strict):
    split: str
    sentences: int
    sha256: str  # of the sources and references scored
    beam: int
    alpha: float | None = None  # length penalty of the search (None: recorded before it was)
    coverage_penalty: float | None = None
    bleu: float
    chrf: float
    bleu_tokenize: str
    loop_rate: float | None = None  # share of outputs with a 1-4 character unit repeated 4+ times in a row
    no_repeat_ngram: int | None = None  # the search's repeat controls when scored
    repetition_penalty: float | None = None


class Provenance(Strict):
    checkpoint_sha256: str
    corpus_sha256: str | None
    git_commit: str | None
    created_at: str
    versions: dict[str, str]
    trained_epochs: int | None = None
    train_seconds: float | None = None
    origin: str = "attention-mt"  # or "huggingface-marian": converted by `attention-mt convert-hf`
    source_config: dict[str, int | float | str | bool | None] = {}  # the converted checkpoint's own settings


class OmissionFlag(Strict):
    """The "unattended source word" signal of this model, measured (export/omission.py): the
    coverage threshold chosen on a dev split, and how it did on a test split against word
    alignments to the reference."""

    threshold: float = Field(ge=0)
    precision: float = Field(ge=0, le=1)  # flagged words that the translation really dropped
    recall: float = Field(ge=0, le=1)  # dropped words that were flagged
    dropped_share: float = Field(ge=0, le=1)  # of content words: what precision is to be compared with
    content_words: int = Field(ge=0)
    measured_on: str


class AttentionView(Strict):
    """The default attention view a client gets: a layer, and the head mean or one head."""

    layer: int = -1
    heads: Literal["mean"] | int = "mean"
    name_alignment_accuracy: float | None = None  # of the chosen view (export/alignment.py)
    name_alignment_cases: int = 0
    accuracy_by_view: dict[str, float] = {}
    chosen_by: str | None = None  # how the view was chosen, in words
    omission: OmissionFlag | None = None  # None: not measured; the service's default threshold applies


class Manifest(Strict):
    schema_version: Literal[1]
    name: str
    source_lang: LanguageCode
    target_lang: LanguageCode
    architecture: Architecture
    graphs: Graphs
    state: list[StateSpec]
    special_ids: SpecialIds
    limits: Limits
    tokenizers: Tokenizers
    quantization: Quantization
    parity: Parity
    quality: list[Score] = []
    attention_view: AttentionView = AttentionView()
    search: SearchDefaults = SearchDefaults()
    provenance: Provenance
    shared_weights: list[SharedWeight] = []
    files: dict[str, FileEntry]
