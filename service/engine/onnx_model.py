"""A bundle's two ONNX graphs behind the search's step protocol, on onnxruntime.

Sessions are created once. State layouts come from the manifest: which decoder inputs are per-
source constants (taken from the encoder by name), which are state carried step to step, how
each state tensor starts, and which axis is its batch. Nothing here knows the model family.

Legend: B batch, S source length, N rows being decoded, V vocabulary.
"""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from service.engine import graph_fusion, heap, native
from service.engine.attention_fusion import SOURCE_ROWS, SOURCES
from service.engine.bundle import Bundle, BundleInvalid, graph_io_problems
from service.engine.graph_fusion import FusedGraph, Fusions
from service.engine.manifest import (
    CACHE_AXIS,
    LEGACY_CACHE_AXIS,
    POSITIONS,
    SOURCE_AXIS,
    GraphSpec,
    StateSpec,
    TensorSpec,
)
from service.engine.row_tables import RowTable, fed, placeholder
from service.engine.search import FloatArray, IntArray, suppress

log = logging.getLogger("attention_mt.engine")

PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
# slots added at a time: a copy of the cache every 8 steps, not every step. 8, not 16: the step's
# attention reads every slot, written or not, and beam 4 x 32 of 20 tokens held 32 slots for 20
# (en-zh 88.7 -> 72.7 ms, OPUS-MT int8 1,680 -> 1,612 ms and 600 -> 574 MB; batch 1 unchanged; 4: no better)
CACHE_CHUNK = 8
# every source width the decoder sees is a multiple of this (encode() pads with masked zeros, as a join
# does). A step's attention over the source is a one-row MatMul per row and head, and onnxruntime's one-row
# kernels sum by where a value falls in blocks of 4: at widths that are multiples of 4 a row alone and the
# same row in a wider batch agree bit for bit (checked to widths of 100-130), at a width like 23 they do
# not. The cache grows by CACHE_CHUNK slots, which keeps its attention exact the same way.
SOURCE_CHUNK = 8
# onnxruntime's fusion of a MatMul and a scalar Mul or Div, off for decoders: fused, the cross-attention
# scores (the /sqrt(d) after q @ k^T) leave the one-row kernel for the general one, which packs the keys for
# every row and head: at 128 rows that MatMul took 2.6x its unfused time, and the shipped int8 step 1.11x
# (1.03x at 32 rows). An encoder's MatMuls have a row per source token and take the general kernel anyway.
DECODER_DISABLED_OPTIMIZERS = ("MatMulScaleFusion",)
# onnxruntime's fusion of an Add and the LayerNormalization after it, off for encoders: in the int8
# graphs it fuses the last layer's residual Add into the final norm, and its SkipLayerNormalization took
# 396-555 us a call at 16 x 20 tokens where an Add and a LayerNormalization took 27 and 51 (profiled): an
# int8 encoder 1.07-1.11x faster without it. fp32 graphs have no such pair. The norm's last bits change.
ENCODER_DISABLED_OPTIMIZERS = ("SkipLayerNormFusion",)
IN_PLACE_BYTES = 256 * 1024  # a beam reshuffle rewrites state tensors this large in place
SHRINK_TO = 0.75  # rows leaving cut the source or cache width when it falls to this share or less
# from this output vocabulary up, onnxruntime's memory pattern is off unless asked for: a pattern is one
# block per input shape, (N, V) tensors included, and a new shape's larger block cannot reuse the freed
# smaller one, so the arena grows by each. OPUS-MT size (V 65,001), int8, beam 4 x 32: peak RSS
# 582 -> 472-475 MB at 1.00-1.06x the speed (fp32 0.99-1.02x); the shipped V 8,000 at batch 1 is 5-8% slower
LARGE_VOCAB = 32_768


@dataclass(frozen=True)
class SessionConfig:
    """onnxruntime options; the service fills these from its settings."""

    provider: str = "cpu"  # cpu | cuda
    intra_op_threads: int = 0  # 0: onnxruntime's default (one per core)
    inter_op_threads: int = 0
    spinning: bool = True  # onnxruntime's default; the service turns it off (MT_INTRA_OP_SPINNING)
    enable_mem_arena: bool = True
    enable_mem_pattern: bool | None = None  # None: on, unless the output vocabulary is LARGE_VOCAB or more
    # every session of the process on onnxruntime's one process-wide pool (see shared_thread_pool)
    shared_thread_pool: bool = False
    # an int8 graph's row quantizations as the attention_mt operators, where built (quant_fusion.py)
    fuse_quantization: bool = True
    # a decoder step's attentions as the attention_mt operators, where built (attention_fusion.py)
    fuse_attention: bool = True
    # the fused cross-attentions read one copy of each sentence's keys and values, however many beams
    # it has (attention_fusion.SOURCE_ROWS); False: a copy per row, as the graph as written has them
    index_sources: bool = True
    # the process's allocations under this many bytes come from a heap that keeps what is freed (heap.py;
    # at most heap.MAX_REUSE_BYTES); 0: glibc's own policy, fresh pages for each large array
    heap_reuse_bytes: int = heap.MAX_REUSE_BYTES

    def __post_init__(self) -> None:
        if self.shared_thread_pool and not self.spinning:
            raise ValueError("onnxruntime's process-wide thread pool always spins: shared_thread_pool needs spinning")


@dataclass
class OnnxState:
    src_pad_mask: npt.NDArray[np.bool_]  # (N, S)
    statics: dict[str, npt.NDArray[Any]]  # encoder outputs the decoder reads every step, (N, ...)
    state: dict[str, npt.NDArray[Any]]  # decoder state inputs, batch on their spec's axis
    extras: dict[str, npt.NDArray[Any]] = field(default_factory=dict)  # other encoder outputs
    # (N,) the encoded sentence of each row; None: row i is sentence i. With statics read by source row
    # (OnnxSeq2Seq.indexed), the row of those statics that each row reads
    origin: IntArray | None = None


def _pad(x: npt.NDArray[Any], axis: int, size: int, value: float | bool) -> npt.NDArray[Any]:
    """x padded at the end of `axis` to `size`. A filled array and one copy, not np.pad: np.pad's
    own overhead (~15 us a call) was 12% of batch-1 greedy decoding, where each sentence's 6 caches
    grow from empty."""
    if x.shape[axis] >= size:
        return x
    shape = list(x.shape)
    shape[axis] = size
    # zeros, not full(0), and one slice: a batch-1 cache widened in 5.4 us, not 8.5
    out = np.zeros(shape, dtype=x.dtype) if value == 0 else np.full(shape, value, dtype=x.dtype)
    index: list[slice] = [slice(None)] * x.ndim
    index[axis] = slice(0, x.shape[axis])
    out[tuple(index)] = x
    return out


def _distinct(arrays: list[npt.NDArray[Any]]) -> list[npt.NDArray[Any]]:
    """Each array once: two state inputs may hold one array, whose rows must move once."""
    return list({id(x): x for x in arrays}.values())


def rounded_up(n: int, chunk: int) -> int:
    """The smallest multiple of `chunk` that is n or more."""
    return -(-n // chunk) * chunk


def _capacity(x: npt.NDArray[Any]) -> int:
    """The rows of the buffer that x (its leading rows) is a view of; len(x) if it is its own."""
    base = x.base
    if isinstance(base, np.ndarray) and base.shape[1:] == x.shape[1:] and base.ctypes.data == x.ctypes.data:
        return max(len(base), len(x))
    return len(x)


def _appended(a: npt.NDArray[Any], b: npt.NDArray[Any], batch_axis: int) -> npt.NDArray[Any]:
    """a's rows then b's (their other axes equal). A large batch-first tensor is written after a in
    a's buffer when it has the rows to spare (rows that left, or room an earlier join made), and a new
    buffer keeps room for the joins to come, so a join copies the newcomers' rows, not the batch:
    copying the batch was 15% of the inference thread at beam 4 under 16 clients on news sentences."""
    if batch_axis != 0 or a.nbytes + b.nbytes < IN_PLACE_BYTES:
        return np.concatenate([a, b], axis=batch_axis)
    n = len(a) + len(b)
    if _capacity(a) >= n:
        buffer = a.base
        assert isinstance(buffer, np.ndarray)
    else:
        buffer = np.empty((n + max(len(b), n // 4), *a.shape[1:]), dtype=a.dtype)
        buffer[: len(a)] = a
    buffer[len(a) : n] = b
    return buffer[:n]


def write_slots(
    cache: npt.NDArray[Any], positions: IntArray, values: npt.NDArray[Any], batch_axis: int, slot_axis: int
) -> None:
    """In place: row b's entry values[b] into `cache` at slot positions[b] (cache (B, N, P, D) and
    values (B, N, D) for a KV cache). One small write a step, where a graph returning the whole
    cache would copy all of it every step."""
    index: list[Any] = [slice(None)] * cache.ndim
    index[batch_axis], index[slot_axis] = np.arange(len(positions)), positions
    cache[tuple(index)] = values


@functools.cache
def shared_cpu_arena() -> None:
    """Register one CPU arena for every session of this process that asks for it. It grows by what is
    asked (onnxruntime's own arenas double), and an encoder, its decoder and other bundles reuse one
    another's freed blocks instead of each keeping its own high-water mark: at OPUS-MT size, beam 4
    x 32, int8, the worker's peak fell 690 -> 634 MB, speed unchanged (0.98-1.00x)."""
    memory = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    ort.create_and_register_allocator(memory, ort.OrtArenaCfg({"arena_extend_strategy": 1}))  # 1: same as requested


_pool_sizes: list[tuple[int, int]] = []  # the process's one shared thread pool, once made
_pool_lock = threading.Lock()


def shared_thread_pool(config: SessionConfig) -> None:
    """For a config that shares it, make onnxruntime's process-wide thread pool with its sizes, once.
    Each session's own pool spins for a while after its run, on the cores the next session's pool
    needs: at OPUS-MT size, fp32 greedy x 1 on two threads, an encoder call took 15-18 ms after decoder
    steps (5 ms alone) and the first decoder steps 13-16 ms (8 alone); one shared pool took a token
    from 10.2 to 7.9 ms, with the same results. Once it exists, onnxruntime refuses sessions with
    threads of their own, and it cannot be resized, so a process holds to one config."""
    sizes = (config.intra_op_threads, config.inter_op_threads)
    if not config.shared_thread_pool:
        if _pool_sizes:
            raise ValueError("this process shares one thread pool: its sessions cannot have threads of their own")
        return
    with _pool_lock:
        if not _pool_sizes:
            ort.set_global_thread_pool_sizes(*sizes)
            _pool_sizes.append(sizes)
    if _pool_sizes[0] != sizes:
        raise ValueError(f"this process's shared thread pool is {_pool_sizes[0]} (intra, inter), not {sizes}")


def make_session(
    model: str | bytes,
    config: SessionConfig,
    initializers: dict[str, ort.OrtValue] | None = None,
    fed_tables: bool = False,
    disabled_optimizers: tuple[str, ...] = (),
    operators: str | None = None,
    folder: str | None = None,
) -> ort.InferenceSession:
    """`model`: a graph's path, or the serialized graph. `initializers`: weights given instead of those
    in the graph (the caller keeps them alive). `fed_tables`: the graph has tables read by row, which
    onnxruntime warns of at every load. `disabled_optimizers`: onnxruntime's graph rewrites by name that
    the session leaves out. `operators`: the path of a library of custom operators the graph uses.
    `folder`: where a serialized graph's external weights are."""
    options = ort.SessionOptions()
    if operators is not None:
        options.register_custom_ops_library(operators)
    if folder is not None:  # a graph loaded from memory finds its external weights here
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", folder)
    if fed_tables:  # "Initializer ... appears in graph inputs": by design here (row_tables.py)
        options.log_severity_level = 3
    for name, value in (initializers or {}).items():
        options.add_initializer(name, value)
    shared_thread_pool(config)
    if config.shared_thread_pool:
        options.use_per_session_threads = False
    else:
        options.intra_op_num_threads = config.intra_op_threads
        options.inter_op_num_threads = config.inter_op_threads
    options.enable_cpu_mem_arena = config.enable_mem_arena
    if config.enable_mem_arena:
        shared_cpu_arena()
        options.add_session_config_entry("session.use_env_allocators", "1")
    options.enable_mem_pattern = config.enable_mem_pattern is not False
    if not config.spinning:  # spinning threads busy-wait between ops, taking CPU the event loop needs
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    providers = [PROVIDERS[config.provider]]
    if config.provider == "cuda":
        providers.append(PROVIDERS["cpu"])  # for the few ops CUDA lacks; startup checks the main one
    session = ort.InferenceSession(
        model, sess_options=options, providers=providers, disabled_optimizers=list(disabled_optimizers)
    )
    if isinstance(model, bytes) and getattr(session, "_model_bytes", None) is model:
        # onnxruntime's Python class keeps a graph given as bytes for as long as the session lives, to
        # make the session again should a provider fail; ours are made on the CPU, once. It held the
        # OPUS-MT-size int8 decoder, 57 MB, for nothing
        session._model_bytes = None
    return session


def read_shared_weights(bundle: Bundle) -> dict[str, dict[str, ort.OrtValue]]:
    """The weights both graphs hold, read once: for each graph, its initializer names -> one buffer
    (a table read by row: one placeholder row, as every call feeds the rows it needs)."""
    given: dict[str, dict[str, ort.OrtValue]] = {"encoder": {}, "decoder": {}}
    for w in bundle.manifest.shared_weights:
        dtype = np.dtype(w.dtype)
        if w.by_row is not None:
            array = placeholder(w)
        else:
            array = np.fromfile(bundle.file(w.file), dtype=dtype, count=w.length // dtype.itemsize, offset=w.offset)
        value = ort.OrtValue.ortvalue_from_numpy(array.reshape(-1, *w.shape[1:]))  # no copy; it holds the array
        given["encoder"][w.encoder] = given["decoder"][w.decoder] = value
    return given


def row_tables(bundle: Bundle) -> dict[str, dict[str, tuple[str, RowTable]]]:
    """For each graph, the tables it is fed by row: ids input -> (table input, table)."""
    tables: dict[str, dict[str, tuple[str, RowTable]]] = {"encoder": {}, "decoder": {}}
    for w in bundle.manifest.shared_weights:
        if w.by_row is not None:
            table = RowTable(bundle.file(w.file), w)
            tables["encoder"][w.by_row.encoder] = (w.encoder, table)
            tables["decoder"][w.by_row.decoder] = (w.decoder, table)
    return tables


def _load_session(
    bundle: Bundle,
    file: str,
    config: SessionConfig,
    initializers: dict[str, ort.OrtValue],
    disabled_optimizers: tuple[str, ...] = (),
    step: bool = False,
) -> tuple[ort.InferenceSession, dict[str, int] | None]:
    """The session of one graph, and the attention_mt operators graph_fusion put in it, by name (None:
    loaded as written). `step`: the graph is the decoder's step, whose attentions may be fused. A fused
    graph onnxruntime refuses (one that lacks what it needs) loads as written."""
    fed_tables = any(w.by_row is not None for w in bundle.manifest.shared_weights)
    fused = _fused(bundle, file, config, frozenset(initializers), step)
    if fused is not None:
        operators, folder = graph_fusion.library(), str(bundle.path)
        counts, model = fused.operators, fused.model
        del fused  # the serialized graph is freed once onnxruntime has read it
        try:
            session = make_session(model, config, initializers, fed_tables, disabled_optimizers, operators, folder)
            del model
            heap.release_freed_memory()
            return session, counts
        except Exception as exc:  # onnxruntime's own exception types
            log.warning("%s: %s loads unfused: onnxruntime refused the fused graph (%s)", bundle.path.name, file,
                        str(exc).splitlines()[0] if str(exc) else type(exc).__name__)  # fmt: skip
    try:
        return make_session(str(bundle.file(file)), config, initializers, fed_tables, disabled_optimizers), None
    except Exception as exc:  # onnxruntime raises its own exception types for unreadable graphs
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BundleInvalid(bundle.path, [f"{file}: onnxruntime cannot load it ({reason})"]) from exc


def _fused(bundle: Bundle, file: str, config: SessionConfig, given: frozenset[str], step: bool) -> FusedGraph | None:
    """The graph with what the config asks fused, on the CPU, where the library is built and the graph
    has something to fuse: an int8 graph's row quantizations, a written decoder step's attentions. A
    graph the rewrite cannot read loads as written, which then says what is wrong with it."""
    int8 = bundle.manifest.quantization.mode == "int8"  # an fp32 graph has no row quantizations
    fusions = Fusions(int8 and config.fuse_quantization, step and config.fuse_attention, config.index_sources)
    if not (fusions.rows or fusions.attention) or config.provider != "cpu" or not graph_fusion.library():
        return None
    try:
        return graph_fusion.fused_graph(bundle.file(file), given, fusions)
    except Exception as exc:  # the onnx package's own errors for unreadable graphs
        log.warning("%s: %s loads unfused (%s: %s)", bundle.path.name, file, type(exc).__name__, exc)
        return None


def output_vocabulary(decoder: GraphSpec) -> int:
    """V of the decoder's (batch, V) log-probs; 0 when the graph does not fix it."""
    size = next((t.shape[-1] for t in decoder.outputs if t.name == "log_probs"), 0)
    return size if isinstance(size, int) else 0


def with_mem_pattern(config: SessionConfig, vocabulary: int) -> SessionConfig:
    """`config` with the memory pattern decided: as asked, or by the model's output vocabulary."""
    if config.enable_mem_pattern is not None:
        return config
    return replace(config, enable_mem_pattern=vocabulary < LARGE_VOCAB)


def _empty(spec: TensorSpec, batch: int) -> npt.NDArray[Any]:
    shape = [batch if d == "batch" else (d if isinstance(d, int) else 0) for d in spec.shape]
    return np.zeros(shape, dtype=spec.dtype)


class OnnxSeq2Seq:
    """encode() once per batch, then step()/reorder() as the search asks."""

    def __init__(self, bundle: Bundle, config: SessionConfig | None = None) -> None:
        graphs = bundle.manifest.graphs
        config = with_mem_pattern(config or SessionConfig(), output_vocabulary(graphs.decoder))
        self.bundle = bundle
        shared_thread_pool(config)  # a config the process's threads refuse fails here, not as a bad bundle
        heap.reuse_freed_memory(config.heap_reuse_bytes)
        # one copy of a tied embedding for both sessions on the CPU (a device session copies it anyway);
        # onnxruntime reads these buffers for as long as the sessions live
        self._shared = read_shared_weights(bundle) if config.provider == "cpu" else {}
        # a device session keeps its table (the default the graph holds); fed rows would cross the bus
        self._rows = row_tables(bundle) if config.provider == "cpu" else {"encoder": {}, "decoder": {}}
        # the decoder first: loading a graph holds its weights twice for a moment (read, then
        # prepacked), and the decoder's are the larger; OPUS-MT size fp32 peaked 697 -> 566 MB loading
        self.decoder, fused_decoder = _load_session(
            bundle, graphs.decoder.file, config, self._shared.get("decoder", {}), DECODER_DISABLED_OPTIMIZERS, step=True
        )
        encoder_weights = self._shared.get("encoder", {})
        self.encoder, fused_encoder = _load_session(
            bundle, graphs.encoder.file, config, encoder_weights, ENCODER_DISABLED_OPTIMIZERS
        )
        # attention_mt operators in each graph, by name, for the ready log
        self.fused = {role: counts for role, counts in
                      (("encoder", fused_encoder), ("decoder", fused_decoder)) if counts is not None}  # fmt: skip
        problems = graph_io_problems(graphs.encoder, self.encoder.get_inputs(), self.encoder.get_outputs())
        decoder_inputs = [i for i in self.decoder.get_inputs() if i.name != SOURCE_ROWS]  # the fused graph's own
        problems += graph_io_problems(graphs.decoder, decoder_inputs, self.decoder.get_outputs())
        problems += self._row_table_problems()
        if problems:
            raise BundleInvalid(bundle.path, problems)
        self.state_specs: list[StateSpec] = bundle.manifest.state
        state_inputs = {s.input for s in self.state_specs}
        self.static_names = [
            t.name for t in graphs.decoder.inputs if t.name not in state_inputs | {"prev_tokens", "src_pad_mask"}
        ]
        # statics the fused graph reads by source row (attention_fusion.SOURCE_ROWS): one row per sentence,
        # however many beams read it, never copied out to the rows
        self.indexed = frozenset(i.name for i in decoder_inputs if i.shape and i.shape[0] == SOURCES)
        if self.indexed - set(self.static_names):
            raise BundleInvalid(bundle.path, [f"decoder: {n} is read by source row but is no encoder output"
                                              for n in sorted(self.indexed - set(self.static_names))])  # fmt: skip
        self.output_names = [t.name for t in graphs.decoder.outputs]
        inputs = {t.name: t for t in graphs.decoder.inputs}
        self.axes = {name: [(i, d) for i, d in enumerate(spec.shape) if isinstance(d, str) and d != "batch"]
                     for name, spec in inputs.items()}  # fmt: skip
        self.slotted = POSITIONS in state_inputs
        self.slot_axis = {name: i for name in state_inputs for i, d in self.axes[name] if d == CACHE_AXIS}
        # a slot is written at each row's position (POSITIONS), on the cache axis
        unwritable = [s.input for s in self.state_specs if s.write == "slot"
                      and not (self.slotted and s.input in self.slot_axis)]  # fmt: skip
        if unwritable:
            need = f"write 'slot' needs a {CACHE_AXIS} axis and {POSITIONS}"
            raise BundleInvalid(bundle.path, [f"state {name}: {need}" for name in unwritable])
        self._slot_specs = [s for s in self.state_specs if s.write == "slot"]
        self._slot_names = [(s.input, s.output) for s in self._slot_specs]
        self._carried = [(s.input, s.output) for s in self.state_specs if s.write != "slot"]  # fed back as output
        # the inner session's `run` on the CPU: the Python wrapper checks input names the runtime checks
        # again, and its fallback remakes a session after a GPU provider's failure, which a CPU one has not
        # (with the new state from name pairs: greedy x 1 int8 1.049x, paired). A release without `_sess`
        # gets the wrapper
        inner = getattr(self.decoder, "_sess", None) if config.provider == "cpu" else None
        self._run = inner.run if inner is not None else self.decoder.run
        self._batch_first = all(s.batch_axis == 0 for s in self.state_specs)
        # the kernel writes (B, H, P, D) caches: batch first, slots third
        self._kernel_slots = all(
            s.batch_axis == 0 and self.slot_axis[s.input] == 2 and len(inputs[s.input].shape) == 4
            for s in self._slot_specs
        )
        # sentences can join a running batch unless rows share one position (a cache that grows by concat)
        self.joinable = not any(d == LEGACY_CACHE_AXIS for s in state_inputs for _, d in self.axes[s])
        special, search = bundle.manifest.special_ids, bundle.manifest.search
        suppressed = (special.pad, special.bos) if search.suppressed_ids is None else search.suppressed_ids
        self.suppressed, self.renormalize = tuple(dict.fromkeys(suppressed)), search.renormalize

    def _row_table_problems(self) -> list[str]:
        """A table fed by row must be an initializer the graph lets a feed override, indexed by one of
        the graph's declared inputs."""
        problems = []
        graphs = self.bundle.manifest.graphs
        for role, session, spec in (
            ("encoder", self.encoder, graphs.encoder),
            ("decoder", self.decoder, graphs.decoder),
        ):
            overridable = {i.name for i in session.get_overridable_initializers()}
            for ids, (table, _) in self._rows[role].items():
                if table not in overridable or ids not in {t.name for t in spec.inputs}:
                    problems.append(f"shared_weights: {role} cannot be fed {table} by the rows of {ids}")
        return problems

    def encode(self, src_ids: IntArray, src_pad_mask: npt.NDArray[np.bool_]) -> OnnxState:
        """Run the encoder on (B, S) ids and mask; returns the state before the first step, its source
        axis padded to S', the next multiple of SOURCE_CHUNK (zeros, masked)."""
        names = [t.name for t in self.bundle.manifest.graphs.encoder.outputs]
        values = self.encoder.run(names, fed(self._rows["encoder"], {"src_ids": src_ids, "src_pad_mask": src_pad_mask}))
        outputs = dict(zip(names, values, strict=True))
        state = {}
        for spec in self.state_specs:
            if spec.init == "empty":
                state[spec.input] = _empty(self.bundle.manifest.graphs.decoder.input(spec.input), len(src_ids))
            else:
                state[spec.input] = outputs[spec.init.removeprefix("encoder:")]
        statics = {name: outputs[name] for name in self.static_names}
        extras = {k: v for k, v in outputs.items() if k not in statics}
        return self._source_chunked(OnnxState(src_pad_mask, statics, state, extras))

    def _source_chunked(self, state: OnnxState) -> OnnxState:
        """`state` with its source axis padded to a multiple of SOURCE_CHUNK: zeros, masked, as `merge`
        pads a shorter batch. The encoder's input is not padded: a 10-token source padded to 16 took
        the encoder 575 us at batch 1 instead of 435."""
        width = state.src_pad_mask.shape[1]
        size = rounded_up(width, SOURCE_CHUNK)
        if size == width:
            return state

        def padded(name: str, x: npt.NDArray[Any]) -> npt.NDArray[Any]:
            for axis, dim in self.axes[name]:
                if dim == SOURCE_AXIS:
                    x = _pad(x, axis, size, 0)
            return x

        statics = {k: padded(k, v) for k, v in state.statics.items()}
        tensors = {k: padded(k, v) for k, v in state.state.items()}
        return OnnxState(_pad(state.src_pad_mask, 1, size, True), statics, tensors, state.extras, state.origin)

    def run_step(self, tokens: IntArray, state: OnnxState) -> tuple[dict[str, npt.NDArray[Any]], OnnxState]:
        """One decoder step; every output by name, and the state for the next step."""
        if self.slotted:
            state = self._with_room(state)
        feeds = {"prev_tokens": tokens, "src_pad_mask": state.src_pad_mask, **state.statics, **state.state}
        if self.indexed:
            feeds[SOURCE_ROWS] = np.arange(len(tokens)) if state.origin is None else state.origin
        feeds = fed(self._rows["decoder"], feeds)
        outputs = dict(zip(self.output_names, self._run(self.output_names, feeds, None), strict=True))
        self._write_slots(state, outputs)  # the step's keys and values, into the caches where each row is
        new_state = {name: outputs[output] for name, output in self._carried}
        for name, _ in self._slot_names:
            new_state[name] = state.state[name]
        return outputs, OnnxState(state.src_pad_mask, state.statics, new_state, state.extras, state.origin)

    def _write_slots(self, state: OnnxState, outputs: dict[str, npt.NDArray[Any]]) -> None:
        """Every slot cache's new entries: one call of the C kernel for all of them where it applies
        (6 numpy assignments took 23-37 us a step at batch 1 and beam 4 x 1), else one by one."""
        if not self._slot_specs:
            return
        caches = [state.state[name] for name, _ in self._slot_names]
        values = [outputs[output] for _, output in self._slot_names]
        positions = state.state[POSITIONS]
        if self._kernel_slots and native.write_slots(caches, values, positions):
            return
        for spec, cache, value in zip(self._slot_specs, caches, values, strict=True):
            write_slots(cache, positions, value, spec.batch_axis, self.slot_axis[spec.input])

    def step(self, tokens: IntArray, state: OnnxState) -> tuple[FloatArray, FloatArray, OnnxState]:
        outputs, new_state = self.run_step(tokens, state)
        log_probs = suppress(outputs["log_probs"], self.suppressed, self.renormalize)
        return log_probs, outputs["cross_attention"], new_state

    def _with_room(self, state: OnnxState) -> OnnxState:
        """`state` with caches wide enough for every row's position to have a slot (zeros: masked until
        written), widened in the state itself, one at a time: each narrow cache is freed before the next
        is widened, so the peak holds one of them, not all (OPUS-MT size, int8, beam 4 x 32: 617-620 ->
        581-582 MB)."""
        # a list's max, not numpy's reduction: at a few rows, right after a step, positions.max() took
        # 15 us of a 30 us call
        need = max(state.state[POSITIONS].tolist(), default=-1) + 1
        tensors = state.state
        for name, axis in self.slot_axis.items():
            if tensors[name].shape[axis] < need:
                tensors[name] = _pad(tensors[name], axis, rounded_up(need, CACHE_CHUNK), 0)
        return state

    def merge(self, a: OnnxState, b: OnnxState) -> OnnxState:
        """One state with a's rows then b's: sources padded to the longer, caches to the wider.
        Exact: padding is masked (the source) or not yet written (the cache), and the graphs add
        padding's zeros in order (export/invariant_quant.py), so no row's result changes."""
        if not self.joinable:
            raise ValueError("this bundle's decoder cannot take rows at different positions")
        width = max(a.src_pad_mask.shape[1], b.src_pad_mask.shape[1])
        masks = [_pad(m, 1, width, True) for m in (a.src_pad_mask, b.src_pad_mask)]
        statics = {name: self._joined(name, a.statics[name], b.statics[name], 0) for name in a.statics}
        tensors = {s.input: self._joined(s.input, a.state[s.input], b.state[s.input], s.batch_axis)
                   for s in self.state_specs}  # fmt: skip
        origin_a = np.arange(len(a.src_pad_mask)) if a.origin is None else a.origin
        origin_b = np.arange(len(b.src_pad_mask)) if b.origin is None else b.origin
        # b's sentences are numbered after a's: after the rows of a's indexed statics, which b's follow
        held = next((len(a.statics[name]) for name in self.indexed), None)
        after = held if held is not None else (int(origin_a.max()) + 1 if len(origin_a) else 0)
        origin = np.concatenate([origin_a, origin_b + after])
        return OnnxState(np.concatenate(masks), statics, tensors, {}, origin)

    def _joined(self, name: str, a: npt.NDArray[Any], b: npt.NDArray[Any], batch_axis: int) -> npt.NDArray[Any]:
        for axis, _ in self.axes[name]:
            size = max(a.shape[axis], b.shape[axis])
            a, b = _pad(a, axis, size, 0), _pad(b, axis, size, 0)
        return _appended(a, b, batch_axis)

    def reorder(self, state: OnnxState, rows: IntArray) -> OnnxState:
        """Select state rows. The per-source tensors (cross-attention keys and values, the mask) follow
        only the sentence of each row: a beam reshuffle within sentences leaves them as they are,
        which saves copying them every beam step. Rows that stay where they are are not copied."""
        origin = np.arange(len(state.src_pad_mask)) if state.origin is None else state.origin
        new_origin = origin[rows]
        n = len(rows)
        sizes = self._needed(state, rows) if n < len(origin) else {}
        if n > len(origin) or self._shrinks(state, sizes):
            # rows repeated (a beam starts), or what only the leavers needed (a longer source, cache slots) goes too
            mask = self._take("src_pad_mask", state.src_pad_mask, rows, 0, sizes)
            statics = {k: self._take(k, v, rows, 0, sizes) for k, v in state.statics.items() if k not in self.indexed}
            tensors = {
                s.input: self._take(s.input, state.state[s.input], rows, s.batch_axis, sizes) for s in self.state_specs
            }
            indexed, new_origin = self._sentences(state.statics, new_origin, sizes)
            return OnnxState(mask, statics | indexed, tensors, state.extras, new_origin)
        moved = np.flatnonzero(rows != np.arange(n))  # rows whose content comes from another row
        other_source = np.flatnonzero(new_origin != origin[:n])  # rows whose content comes from another sentence
        mask, statics = state.src_pad_mask, state.statics
        if len(other_source) or n < len(origin):  # rows change sentence or leave; a beam reshuffle does neither
            mask = state.src_pad_mask[rows]
            statics = {k: self._selected(v, rows, other_source, 0) for k, v in statics.items() if k not in self.indexed}
            indexed, new_origin = self._sentences(state.statics, new_origin, {})
            statics |= indexed
        return OnnxState(mask, statics, self._moved(state, rows, moved), state.extras, new_origin)

    def _sentences(
        self, statics: dict[str, npt.NDArray[Any]], origin: IntArray, sizes: dict[str, int]
    ) -> tuple[dict[str, npt.NDArray[Any]], IntArray]:
        """The indexed statics for rows reading them at `origin`, and the rows' new `origin`: as they are,
        or, when `sizes` cuts an axis or a quarter or more of their sentences no row reads any more (rows
        leave; sentences join at the end), only the sentences read, renumbered."""
        kept = {k: v for k, v in statics.items() if k in self.indexed}
        if not kept:
            return {}, origin
        read, renumbered = np.unique(origin, return_inverse=True)
        if not sizes and len(read) > SHRINK_TO * len(next(iter(kept.values()))):
            return kept, origin
        return {k: self._take(k, v, read, 0, sizes) for k, v in kept.items()}, renumbered

    def _moved(self, state: OnnxState, rows: IntArray, moved: IntArray) -> dict[str, npt.NDArray[Any]]:
        """The state tensors' rows `rows`, the moved ones rewritten in place: by the C kernel, all
        tensors in one call, where it applies (six takes and the positions' took 42-62 us a beam 4 x 1
        step), else tensor by tensor (`_selected`)."""
        specs, n = self.state_specs, len(rows)
        arrays = [state.state[s.input] for s in specs]
        if len(moved) and self._batch_first and native.move_rows(_distinct(arrays), rows, moved):
            return {s.input: x if len(x) == n else x[:n] for s, x in zip(specs, arrays, strict=True)}
        selected: dict[int, npt.NDArray[Any]] = {}
        for spec, x in zip(specs, arrays, strict=True):
            if id(x) not in selected:
                selected[id(x)] = self._selected(x, rows, moved, spec.batch_axis)
        return {s.input: selected[id(x)] for s, x in zip(specs, arrays, strict=True)}

    @staticmethod
    def _selected(x: npt.NDArray[Any], rows: IntArray, moved: IntArray, batch_axis: int) -> npt.NDArray[Any]:
        """x's rows `rows` (no more than it has); `moved`: the places whose content is another row's.

        A large tensor is rewritten in place, only its moved rows (read into one buffer first, since a
        row may be both read and overwritten), and when rows left, its first len(rows) are returned (a
        view, still contiguous, with the batch first). A new array held every cache twice at the peak
        (100 MB more at OPUS-MT size, beam 4 x 32) and was slower from a few MB up (fresh pages to
        fault in); with sentences leaving, it copied every row at most steps of beam 4 x 32 on real
        sentences. The search has dropped the state this one replaces, and a step writes its slots
        into these arrays in place already (write_slots). A small one is copied whole: one take costs
        less than two fancy-indexing passes (2.3 against 4.2 us at 64 KB). When no row moves, nothing
        is copied (a beam step that keeps its rows in place: 27.5 -> 8.7 us a reorder at beam 4 x 1)."""
        same_size = len(rows) == x.shape[batch_axis]
        if same_size and not len(moved):  # every row stays where it is
            return x
        if x.nbytes < IN_PLACE_BYTES or not (same_size or batch_axis == 0):
            return np.take(x, rows, axis=batch_axis)
        if len(moved):
            x[(slice(None),) * batch_axis + (moved,)] = np.take(x, rows[moved], axis=batch_axis)
        return x if same_size else x[: len(rows)]

    def _shrinks(self, state: OnnxState, sizes: dict[str, int]) -> bool:
        """Whether a named axis (source, cache slots) would lose a quarter or more with `sizes`: then
        every state tensor is copied, for less to read at every later step; a smaller cut is left as
        padding (masked, or slots not written, which changes no result). Under continuous batching the
        oldest rows, which set the cache's width, are the ones that leave; cutting at every chunk of
        slots they freed served 2-4% fewer news sentences a second (beam 4 at 16 clients, greedy at
        32) and made no difference offline."""
        if not sizes:  # a beam reshuffle: no row left, nothing to cut
            return False
        widths = [(sizes.get(SOURCE_AXIS), state.src_pad_mask.shape[1])]
        widths += [(sizes.get(CACHE_AXIS), state.state[name].shape[axis]) for name, axis in self.slot_axis.items()]
        return any(need is not None and need <= SHRINK_TO * now for need, now in widths)

    def _needed(self, state: OnnxState, rows: IntArray) -> dict[str, int]:
        """The source width and cache slots the selected rows still need, where that is less than now."""
        real = np.flatnonzero(~state.src_pad_mask[rows].all(axis=0))
        sizes = {SOURCE_AXIS: rounded_up(int(real[-1]) + 1, SOURCE_CHUNK) if len(real) else 0}
        if self.slotted:
            positions = state.state[POSITIONS][rows]
            slots = rounded_up(int(positions.max()), CACHE_CHUNK) if len(positions) else 0
            sizes[CACHE_AXIS] = slots
        return sizes

    def _take(
        self, name: str, x: npt.NDArray[Any], rows: IntArray, batch_axis: int, sizes: dict[str, int]
    ) -> npt.NDArray[Any]:
        """x's rows, cut to `sizes` on its named axes (a view first: one copy in all)."""
        cut = [slice(None)] * x.ndim
        for axis, dim in self.axes.get(name, [(1, SOURCE_AXIS)] if name == "src_pad_mask" else []):
            if dim in sizes and sizes[dim] < x.shape[axis]:
                cut[axis] = slice(0, sizes[dim])
        return np.take(x[tuple(cut)], rows, axis=batch_axis)
