"""The C kernels (service/engine/_native.c) against the numpy they replace: the same cache slots
written, rows moved and beam candidates ranked, the same translations, and a clean refusal of what
they do not take. The per-row selection's kernel is tested with the search (test_search.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from service.engine import native
from service.engine.beam import BeamDecode
from service.engine.bundle import load_bundle
from service.engine.onnx_model import OnnxSeq2Seq, SessionConfig, write_slots
from service.engine.scoring import Scoring
from service.engine.search import beam_search, greedy_search
from service.engine.translator import pad_ids


@pytest.fixture(autouse=True)
def built() -> None:
    if native.available() is None:
        pytest.fail("the C kernel is not built: pip install -e . needs a C compiler (see pyproject.toml)")


def caches_and_values(rows: int, seed: int) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    caches = [rng.standard_normal((rows, 4, 16, 8)).astype(np.float32) for _ in range(6)]
    values = [rng.standard_normal((rows, 4, 8)).astype(np.float32) for _ in range(6)]
    return caches, values, rng.integers(0, 16, rows)


@pytest.mark.parametrize("rows", [1, 3, 40])
def test_every_cache_gets_each_rows_entry_at_its_slot(rows: int) -> None:
    caches, values, positions = caches_and_values(rows, rows)
    expected = [c.copy() for c in caches]
    for cache, value in zip(expected, values, strict=True):
        write_slots(cache, positions, value, batch_axis=0, slot_axis=2)
    assert native.write_slots(caches, values, positions)
    for got, want in zip(caches, expected, strict=True):
        np.testing.assert_array_equal(got, want)


def test_what_the_kernel_does_not_take_is_left_untouched() -> None:
    """A float64 cache, a strided view, a position past the cache, a value of the wrong shape:
    False and nothing written, in any of the caches (numpy answers them as it always did)."""
    caches, values, positions = caches_and_values(3, 7)
    before = [c.copy() for c in caches]
    bad_cases = [
        ([*caches[:5], caches[5].astype(np.float64)], values, positions),
        ([*caches[:5], caches[5][:, :, ::2]], values, positions),
        (caches, values, np.array([0, 16, 2])),
        (caches, values, np.array([0, -1, 2])),
        (caches, [*values[:5], values[5][:, :3]], positions),
        (caches, values, positions[:2]),
        (caches, values, positions.astype(np.int32)),
        (caches, values[:5], positions),
    ]
    for bad_caches, bad_values, bad_positions in bad_cases:
        assert not native.write_slots(bad_caches, bad_values, bad_positions)
    for got, want in zip(caches, before, strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_read_only_cache_is_refused() -> None:
    caches, values, positions = caches_and_values(2, 9)
    caches[3].flags.writeable = False
    assert not native.write_slots(caches, values, positions)


def test_translations_are_the_same_with_the_kernels_or_numpy(bundle_dir: Path) -> None:
    """A real bundle decoded greedy and at beam 4, a batch of mixed lengths: hypotheses, token
    log-probs, attention and scores equal to the bit with the kernels and with numpy alone."""
    bundle = load_bundle(bundle_dir / "en-zh")
    model = OnnxSeq2Seq(bundle, SessionConfig(intra_op_threads=1))
    assert model._kernel_slots  # the kernel is on the path under test
    sources = [[5, 9, 14, 3], [7, 3], [11, 12, 13, 21, 8, 6, 3], [4, 4, 9, 3]]
    special = bundle.manifest.special_ids

    def decode() -> list[tuple[list[int], list[float], bytes, float]]:
        ids, mask = pad_ids(sources)
        lengths = np.full(len(sources), 12)
        greedy = [[h] for h in greedy_search(model, model.encode(ids, mask), lengths, special.bos, special.eos)]
        beams = beam_search(model, model.encode(ids, mask), lengths, special.bos, special.eos, 4, 2)
        return [
            (h.tokens, list(h.token_log_probs), np.ascontiguousarray(h.attention).tobytes(), h.score)
            for nbest in greedy + beams
            for h in nbest
        ]

    with_kernels = decode()
    with native.numpy_only():
        assert decode() == with_kernels


@pytest.mark.parametrize("leaving", [0, 2])
def test_rows_move_in_place_as_numpy_takes_them(leaving: int) -> None:
    """Beams that share a parent (a row read twice), rows that stay, rows that leave: every array's
    first rows are x[rows], whatever its dtype and shape; rows past them are left alone."""
    rng = np.random.default_rng(leaving)
    arrays = [rng.standard_normal((8, 4, 6, 3)).astype(np.float32), rng.integers(0, 99, 8), rng.random((10, 5))]
    rows = np.array([0, 0, 2, 1, 5, 5, 7, 6])[: 8 - leaving]
    moved = np.flatnonzero(rows != np.arange(len(rows)))
    expected = [x[rows] for x in arrays]
    tails = [x[len(rows) :].copy() for x in arrays]
    assert native.move_rows(arrays, rows, moved)
    for x, want, tail in zip(arrays, expected, tails, strict=True):
        np.testing.assert_array_equal(x[: len(rows)], want)
        np.testing.assert_array_equal(x[len(rows) :], tail)


def test_rows_the_kernel_does_not_take_are_left_untouched() -> None:
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((4, 2))]
    before = [x.copy() for x in arrays]
    rows = np.array([1, 1, 0, 3])
    moved = np.array([0, 2])
    read_only = arrays[1].copy()
    read_only.flags.writeable = False
    for bad_arrays, bad_rows, bad_moved in [
        ([arrays[0], read_only], rows, moved),
        ([arrays[0], np.asfortranarray(rng.standard_normal((4, 2)))], rows, moved),
        (arrays, np.array([1, 1, 0, 4]), np.array([0, 2, 3])),
        (arrays, rows, np.array([0, 4])),
        (arrays, rows.astype(np.int32), moved),
        ([arrays[0], arrays[1][:3]], rows, moved),
    ]:
        assert not native.move_rows(bad_arrays, bad_rows, bad_moved)
    for got, want in zip(arrays, before, strict=True):
        np.testing.assert_array_equal(got, want)


def test_beam_candidates_are_numpys_to_the_bit() -> None:
    """Each sentence's 2K candidates (rows, tokens, cumulative scores) from the kernel equal the numpy
    path's: ties everywhere, -inf scores (the beams that start dead), K from 1 to 6, vocabularies
    from 3 to 9,000."""
    rng = np.random.default_rng(11)
    for _ in range(80):
        K, sentences, vocab = int(rng.integers(1, 7)), int(rng.integers(1, 9)), int(rng.integers(3, 9000))
        log_probs = (np.round(rng.standard_normal((K * sentences, vocab)) * 2) / 2 - 8).astype(np.float32)
        log_probs[rng.random(log_probs.shape) < 0.02] = -np.inf
        decode = BeamDecode(np.full(sentences, 10), 2, 3, K, 1, Scoring())
        decode.cum = np.round(rng.standard_normal(K * sentences), 1)
        decode.cum[rng.random(K * sentences) < 0.2] = -np.inf
        by_kernel = decode._candidates(log_probs)
        with native.numpy_only():
            by_numpy = decode._candidates(log_probs)
        for got, want in zip(by_kernel, by_numpy, strict=True):
            np.testing.assert_array_equal(got, want)


def test_beam_candidates_decline_nan_and_what_they_do_not_take() -> None:
    log_probs = np.random.default_rng(6).standard_normal((8, 300)).astype(np.float32)
    cum = np.zeros(8)
    assert native.beam_candidates(log_probs, cum, 4, 8) is not None
    assert native.beam_candidates(log_probs, cum, 3, 8) is None  # 8 rows are not sentences of 3
    assert native.beam_candidates(log_probs.astype(np.float64), cum, 4, 8) is None
    assert native.beam_candidates(log_probs, cum.astype(np.float32), 4, 8) is None
    nan = cum.copy()
    nan[5] = np.nan
    assert native.beam_candidates(log_probs, nan, 4, 8) is None


def greedy_tables(sentences: int, steps: int) -> native.GreedyTables:
    return native.GreedyTables(
        np.full((sentences, steps), -7, dtype=np.int64),
        np.full((sentences, steps), 9.0, dtype=np.float32),
        np.full((sentences, steps), -7, dtype=np.int64),
    )


@pytest.mark.parametrize("avx2", [True, False])
def test_greedy_choices_are_numpys_to_the_bit(avx2: bool) -> None:
    """Each row's token (argmax's: the lowest column among equal values), its log-prob and its place
    at [sentence, step], and the rows that end: the kernel and the numpy path agree on ties, -inf rows,
    rows all -inf, vocabularies from 1 to 9,000 (under and over the vector width), on both paths."""
    rng = np.random.default_rng(12)
    for _ in range(120):
        sentences, vocab, steps = int(rng.integers(1, 12)), int(rng.choice([1, 7, 31, 32, 33, 300, 9000])), 6
        lengths = rng.integers(1, steps + 1, sentences)
        rows = rng.permutation(sentences)[: int(rng.integers(1, sentences + 1))]
        log_probs = (np.round(rng.standard_normal((len(rows), vocab)) * 2) / 2 - 8).astype(np.float32)
        log_probs[rng.random(log_probs.shape) < 0.05] = -np.inf
        log_probs[rng.random(len(rows)) < 0.1] = -np.inf
        step, eos = int(rng.integers(0, steps)), int(rng.integers(0, vocab))
        chosen = np.empty(len(rows), dtype=np.int64)
        by_kernel, by_numpy = greedy_tables(sentences, steps), greedy_tables(sentences, steps)
        ending = native._native.greedy_choose(
            log_probs, rows, step, lengths, eos, by_kernel.tokens, by_kernel.scores, by_kernel.places, chosen, avx2
        )
        np.testing.assert_array_equal(chosen, log_probs.argmax(axis=1))
        by_numpy.tokens[rows, step], by_numpy.places[rows, step] = chosen, np.arange(len(rows))
        by_numpy.scores[rows, step] = log_probs[np.arange(len(rows)), chosen]
        for got, want in zip(vars(by_kernel).values(), vars(by_numpy).values(), strict=True):
            np.testing.assert_array_equal(got, want)
        assert ending == np.count_nonzero((chosen == eos) | (lengths[rows] <= step + 1))


def test_greedy_choices_decline_nan_and_what_they_do_not_take() -> None:
    """A NaN anywhere in a row (the vector loop's, or the tail's), float64 log-probs, a strided view, a
    step past the tables, a sentence outside them, int32 rows: None, and the tables untouched."""
    rng = np.random.default_rng(3)
    log_probs = rng.standard_normal((3, 45)).astype(np.float32)
    rows, lengths = np.array([2, 0, 1]), np.full(3, 5)
    tables = greedy_tables(3, 5)
    before = [t.copy() for t in vars(tables).values()]
    for column in (0, 17, 44):
        nan = log_probs.copy()
        nan[1, column] = np.nan
        assert native.greedy_choose(nan, rows, 0, lengths, 3, tables) is None
    assert native.greedy_choose(log_probs.astype(np.float64), rows, 0, lengths, 3, tables) is None
    assert native.greedy_choose(log_probs[:, ::2], rows, 0, lengths, 3, tables) is None
    assert native.greedy_choose(log_probs, rows, 5, lengths, 3, tables) is None
    assert native.greedy_choose(log_probs, np.array([2, 0, 3]), 0, lengths, 3, tables) is None
    assert native.greedy_choose(log_probs, rows.astype(np.int32), 0, lengths, 3, tables) is None
    for got, want in zip(vars(tables).values(), before, strict=True):
        np.testing.assert_array_equal(got, want)
    assert native.greedy_choose(log_probs, rows, 0, lengths, 3, tables) is not None


@pytest.mark.parametrize("kernel", [True, False])
def test_an_array_two_state_inputs_share_moves_once(
    bundle_dir: Path, monkeypatch: pytest.MonkeyPatch, kernel: bool
) -> None:
    """A state whose two inputs hold one array (a manifest may start two from one encoder output): a
    beam's reorder moves that array's rows once, by the kernel or by numpy, not once per input."""
    if not kernel:
        monkeypatch.setattr(native._switch, "declining", True)  # numpy_only() for the whole test
    model = OnnxSeq2Seq(load_bundle(bundle_dir / "en-zh"), SessionConfig(intra_op_threads=1))
    ids, mask = pad_ids([[5, 9, 14, 3], [7, 8, 3]])
    state = model.reorder(model.encode(ids, mask), np.array([0, 0, 1, 1]))  # two beams a sentence
    first, second = (s.input for s in model._slot_specs[:2])
    shared = np.random.default_rng(8).standard_normal(state.state[first].shape).astype(np.float32)
    state.state[first] = state.state[second] = shared
    before = shared.copy()
    rows = np.array([1, 1, 3, 2])  # beams that share a parent, within each sentence
    after = model.reorder(state, rows)
    np.testing.assert_array_equal(after.state[first], before[rows])
    assert after.state[second] is after.state[first]
