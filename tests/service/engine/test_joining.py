"""Continuous batching on freshly exported and converted bundles (the shipped ones are covered by
test_batch_invariance.py): sentences that join a running batch mid-decode get exactly what they
get alone, greedy next to beam, fp32 and int8, our Transformer and a converted Marian; and the
batch's state shrinks back when the sentences that needed more leave."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from service.engine import onnx_model
from service.engine.bundle import load_bundle
from service.engine.onnx_model import CACHE_CHUNK, SOURCE_CHUNK, OnnxSeq2Seq, OnnxState, rounded_up
from service.engine.search import Cohort, Hypothesis
from service.engine.translator import SearchOptions, Translator, pad_ids
from tests.support.synthetic import synthetic_pairs


def sources(translator: Translator) -> list[list[int]]:
    english = [en for en, _ in synthetic_pairs()[::37]][:10]
    texts = [*english, " and ".join(english[:4])]  # one long sentence: its source pads the others
    return translator.source_ids(texts)


def decoded(cohort: Cohort[OnnxState], found: dict[int, Hypothesis], steps: int | None = None) -> None:
    while not cohort.done and (steps is None or steps > 0):
        found |= {s: nbest[0] for s, nbest in cohort.step()}
        steps = None if steps is None else steps - 1


def begun(
    translator: Translator, first: list[list[int]], later: list[list[int]], options: SearchOptions, steps: int
) -> tuple[list[Hypothesis], Cohort[OnnxState], dict[int, Hypothesis]]:
    """Each sentence of `first` and `later` decoded alone, and `first` begun as a cohort and decoded
    for `steps` steps, none finished yet."""
    alone = [translator.search_ids([i], options)[0][0] for i in [*first, *later]]
    cohort = translator.begin(first, options)
    found: dict[int, Hypothesis] = {}
    decoded(cohort, found, steps=steps)
    assert not found
    return alone, cohort, found


def check_joining(translator: Translator) -> None:
    """Greedy and beam next to each other, and two beam searches."""
    ids = sources(translator)
    first, second = ids[::2], ids[1::2]
    greedy, beam = translator.options(beam_size=1), translator.options(beam_size=3)
    for a, b in ((greedy, beam), (beam, greedy), (beam, beam)):
        alone = [translator.search_ids([i], o)[0][0] for i, o in [*((i, a) for i in first), *((i, b) for i in second)]]
        cohort = translator.begin(first, a)
        found: dict[int, Hypothesis] = {}
        decoded(cohort, found, steps=2)
        assert cohort.join(translator.begin(second, b)) == len(first)
        decoded(cohort, found)
        for i, expected in enumerate(alone):
            width = expected.attention.shape[-1]
            assert found[i].tokens == expected.tokens
            assert found[i].token_log_probs == expected.token_log_probs
            assert np.array_equal(found[i].attention[..., :width], expected.attention)


@pytest.mark.parametrize("in_place_bytes", [0, 1 << 60])
@pytest.mark.parametrize("name", ["en-zh", "en-zh-int8"])
def test_exported_bundles_take_sentences_mid_decode(
    bundle_dir: Path, name: str, in_place_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Also with every state tensor rewritten in place as sentences leave (OnnxSeq2Seq._selected)."""
    monkeypatch.setattr(onnx_model, "IN_PLACE_BYTES", in_place_bytes)
    translator = Translator(load_bundle(bundle_dir / name))
    assert translator.model.joinable and translator.model.slotted
    check_joining(translator)


@pytest.mark.parametrize("name", ["en-de", "marian-en-zh"])
def test_converted_bundles_take_sentences_mid_decode(converted_bundles: Path, name: str) -> None:
    check_joining(Translator(load_bundle(converted_bundles / name)))


def test_rows_that_leave_take_their_source_and_cache_slots_with_them(bundle_dir: Path) -> None:
    translator = Translator(load_bundle(bundle_dir / "en-zh"))
    model, ids = translator.model, sources(translator)
    long, short = ids[-1], ids[0]
    greedy = SearchOptions(beam_size=1)
    cohort = translator.begin([long], greedy)
    cohort.join(translator.begin([short], greedy))
    wide, narrow = rounded_up(len(long), SOURCE_CHUNK), rounded_up(len(short), SOURCE_CHUNK)
    assert cohort.state.src_pad_mask.shape[1] == wide
    assert narrow <= 0.75 * wide  # short enough that the cut is worth a copy
    cohort.drop({0})  # the long sentence's caller left
    assert cohort.state.src_pad_mask.shape[1] == narrow  # the source axis cut to what is left
    assert all(v.shape[2] == narrow for k, v in cohort.state.statics.items())

    state = model.encode(*pad_ids([short, short]))
    state.state["positions"] = np.array([40, 3])  # row 0 has written 40 slots, row 1 three
    state = model.reorder(model.run_step(np.array([5, 5]), state)[1], np.array([1]))
    assert state.state["past_key.0"].shape[2] == CACHE_CHUNK  # one chunk of slots is what row 1 needs
    assert state.state["positions"].tolist() == [4]


def test_a_step_widens_the_caches_in_the_state_it_is_given(bundle_dir: Path) -> None:
    """The narrow caches are let go as the wide ones are made: a new state beside the old held every
    cache twice at the peak (OPUS-MT size, beam 4 x 32: 37 MB)."""
    import weakref

    translator = Translator(load_bundle(bundle_dir / "en-zh"))
    model, short = translator.model, sources(translator)[0]
    state = model.encode(*pad_ids([short, short]))
    state = model.run_step(np.array([2, 2]), state)[1]
    narrow = {k: weakref.ref(v) for k, v in state.state.items() if k in model.slot_axis}
    assert narrow and all(state.state[name].shape[2] == CACHE_CHUNK for name in narrow)
    state.state["positions"] = np.array([CACHE_CHUNK, 3])  # row 0 needs one slot more than a chunk
    _, after = model.run_step(np.array([5, 5]), state)
    for name, ref in narrow.items():
        assert after.state[name] is state.state[name]  # the state given was widened itself
        assert after.state[name].shape[2] == 2 * CACHE_CHUNK
        assert ref() is None  # nothing holds the narrow cache any more


@pytest.mark.parametrize("dropped_beam", [1, 3])
def test_a_part_whose_callers_all_left_goes_and_the_rest_decode_on(bundle_dir: Path, dropped_beam: int) -> None:
    translator = Translator(load_bundle(bundle_dir / "en-zh-int8"))
    ids = sources(translator)
    kept, gone = ids[:4], ids[4:8]
    options = translator.options(beam_size=4 - dropped_beam)
    alone = [translator.search_ids([i], options)[0][0] for i in kept]
    cohort = translator.begin(kept, options)
    found: dict[int, Hypothesis] = dict((s, nbest[0]) for s, nbest in cohort.step())
    cohort.join(translator.begin(gone, translator.options(beam_size=dropped_beam)))
    found |= {s: nbest[0] for s, nbest in cohort.step() if s < 4}
    cohort.drop(set(range(4, 8)))  # every caller of the joined part left (deadline, disconnect)
    decoded(cohort, found)
    assert sorted(found) == [0, 1, 2, 3]
    assert [found[i].tokens for i in range(4)] == [h.tokens for h in alone]


@pytest.mark.parametrize("in_place_bytes", [0, 1 << 60])
def test_beam_cohorts_stepping_in_turn_on_one_model_keep_their_own_caches(
    bundle_dir: Path, in_place_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A beam reshuffle rewrites a cohort's large state arrays in place and copies small ones
    (OnnxSeq2Seq._selected): either way, two cohorts of one model, of one shape, stepping in turn,
    must each still get what every sentence gets alone, and keep their own arrays."""
    monkeypatch.setattr("service.engine.onnx_model.IN_PLACE_BYTES", in_place_bytes)
    translator = Translator(load_bundle(bundle_dir / "en-zh-int8"))
    ids = sources(translator)[:10]
    options = translator.options(beam_size=3)
    alone = [translator.search_ids([i], options)[0][0] for i in ids]
    cohorts = [translator.begin(ids[:5], options), translator.begin(ids[5:], options)]
    found: list[dict[int, Hypothesis]] = [{}, {}]
    while not all(c.done for c in cohorts):
        for cohort, results in zip(cohorts, found, strict=True):
            results |= {s: nbest[0] for s, nbest in cohort.step()}
        if not any(c.done for c in cohorts):
            first, second = (c.state.state for c in cohorts)
            assert all(not np.shares_memory(first[name], second[name]) for name in first)
    got = [found[0][i] for i in range(5)] + [found[1][i] for i in range(5)]
    for hypothesis, expected in zip(got, alone, strict=True):
        assert hypothesis.tokens == expected.tokens
        assert hypothesis.token_log_probs == expected.token_log_probs


@pytest.mark.parametrize("batch_axis", [0, 1])
def test_a_reshuffle_in_place_selects_the_rows_a_copy_would(batch_axis: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows read by others and overwritten themselves (cycles, a row taken twice, one dropped); rows
    that all stay where they are are the tensor itself, uncopied."""
    rng = np.random.default_rng(0)
    default = onnx_model.IN_PLACE_BYTES
    for rows in ([1, 0, 3, 2], [0, 0, 2, 2], [2, 0, 1, 3], [0, 1, 2, 3], [3, 3, 3, 3]):
        x = rng.standard_normal((4, 3, 5)) if batch_axis == 0 else rng.standard_normal((2, 4, 5))
        expected = np.take(x, rows, axis=batch_axis)
        moved = np.flatnonzero(np.array(rows) != np.arange(4))
        monkeypatch.setattr(onnx_model, "IN_PLACE_BYTES", default)
        small = x.copy()
        copied = OnnxSeq2Seq._selected(small, np.array(rows), moved, batch_axis)
        assert (copied is small) == (rows == [0, 1, 2, 3])  # under IN_PLACE_BYTES: a new array unless none moved
        np.testing.assert_array_equal(copied, expected)
        monkeypatch.setattr(onnx_model, "IN_PLACE_BYTES", 0)
        out = OnnxSeq2Seq._selected(x, np.array(rows), moved, batch_axis)
        assert out is x
        np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("batch_axis", [0, 1])
def test_rows_that_leave_are_closed_up_in_place_when_the_batch_comes_first(
    batch_axis: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fewer rows than the tensor has: batch-first tensors keep their buffer (the first rows, a
    contiguous view); any other layout is copied."""
    monkeypatch.setattr(onnx_model, "IN_PLACE_BYTES", 0)
    rng = np.random.default_rng(1)
    for rows in ([0, 3, 2], [3, 1], [2, 2], [0, 1]):
        x = rng.standard_normal((4, 3, 5)) if batch_axis == 0 else rng.standard_normal((2, 4, 5))
        expected = np.take(x, rows, axis=batch_axis)
        moved = np.flatnonzero(np.array(rows) != np.arange(len(rows)))
        out = OnnxSeq2Seq._selected(x, np.array(rows), moved, batch_axis)
        np.testing.assert_array_equal(out, expected)
        assert np.shares_memory(out, x) == (batch_axis == 0)
        assert out.flags.c_contiguous


def keys_read(model: OnnxSeq2Seq, state: OnnxState) -> np.ndarray:
    """The first layer's source keys each row reads: its own, or its sentence's where they are indexed."""
    keys = state.statics["cross_key.0"]
    if "cross_key.0" not in model.indexed:
        return keys
    return keys[np.arange(len(keys)) if state.origin is None else state.origin]


@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_sentence_that_leaves_mid_batch_has_its_place_taken_by_the_last(
    bundle_dir: Path, beam_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last sentence's rows move into the gap, the state's large tensors stay in their buffers,
    and the sentences left get what they get alone."""
    monkeypatch.setattr(onnx_model, "IN_PLACE_BYTES", 0)
    translator = Translator(load_bundle(bundle_dir / "en-zh-int8"))
    ids = sources(translator)[:4]
    options = translator.options(beam_size=beam_size)
    alone = [translator.search_ids([i], options)[0][0] for i in ids]
    cohort = translator.begin(ids, options)
    found: dict[int, Hypothesis] = {}
    decoded(cohort, found, steps=2)
    assert not found
    before, keys = dict(cohort.state.state), keys_read(translator.model, cohort.state)
    cohort.drop({1})
    rows = [sentence * beam_size for sentence in (0, 3, 2)]  # sentence 3 took sentence 1's place
    assert np.array_equal(keys_read(translator.model, cohort.state)[::beam_size], keys[rows])
    assert all(np.shares_memory(cohort.state.state[k], before[k]) for k in before if k != "positions")
    decoded(cohort, found)
    assert sorted(found) == [0, 2, 3]
    assert all(found[i].tokens == alone[i].tokens for i in found)
    assert all(found[i].token_log_probs == alone[i].token_log_probs for i in found)


def test_a_join_writes_the_newcomers_into_rows_the_batch_has_to_spare(
    bundle_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a sentence left, the next join fills the rows it freed (no copy of the batch); a join
    with no rows to spare makes a buffer with room for the next. Everyone gets what they get alone."""
    monkeypatch.setattr(onnx_model, "IN_PLACE_BYTES", 0)
    translator = Translator(load_bundle(bundle_dir / "en-zh-int8"))
    ids = sources(translator)
    first, later = ids[:3], ids[3:5]
    options = translator.options(beam_size=1)
    alone, cohort, found = begun(translator, first, later, options, steps=2)
    cohort.drop({1})
    before = dict(cohort.state.state)
    assert cohort.join(translator.begin(later[:1], options)) == 3
    name = "past_key.0"
    assert np.shares_memory(cohort.state.state[name], before[name])  # into the row sentence 1 left
    decoded(cohort, found, steps=1)
    assert not found  # no row has left since the first join
    assert cohort.join(translator.begin(later[1:], options)) == 4  # no row to spare: a new buffer
    grown = cohort.state.state[name]
    assert grown.base is not None and len(grown.base) > len(grown)  # with room for the next
    decoded(cohort, found)
    assert sorted(found) == [0, 2, 3, 4]
    for i, expected in zip([0, 2, 3, 4], [alone[0], *alone[2:]], strict=True):
        assert found[i].tokens == expected.tokens
        assert found[i].token_log_probs == expected.token_log_probs


def test_rows_that_leave_cut_a_width_only_when_a_quarter_of_it_goes(
    bundle_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(onnx_model, "IN_PLACE_BYTES", 0)
    translator = Translator(load_bundle(bundle_dir / "en-zh"))
    model, ids = translator.model, sources(translator)
    state = model.encode(*pad_ids([ids[0], ids[0]]))
    state.state["positions"] = np.array([39, 25])  # 40 slots; row 1 alone needs 32 of them
    stepped = model.run_step(np.array([5, 5]), state)[1]
    kept = model.reorder(stepped, np.array([1]))
    assert kept.state["past_key.0"].shape[2] == 40  # 32 of 40: left as padding, no copy
    assert np.shares_memory(kept.state["past_key.0"], stepped.state["past_key.0"])


def test_beams_read_one_copy_of_their_sentences_keys_which_goes_when_they_leave(bundle_dir: Path) -> None:
    """With the attentions fused, the source's keys and values are read by sentence (SOURCE_ROWS): a
    beam search keeps one copy per sentence, joins append theirs, and once a quarter or more of the
    sentences are no longer read only those still read are kept. Each gets what it gets alone."""
    translator = Translator(load_bundle(bundle_dir / "en-zh-int8"))
    assert translator.model.indexed == {n for n in translator.model.static_names if n.startswith("cross_")}
    ids = sources(translator)
    first, later = ids[:4], ids[4:6]
    options = translator.options(beam_size=3)
    alone, cohort, found = begun(translator, first, later, options, steps=1)
    assert len(cohort.state.src_pad_mask) == 12 and len(cohort.state.statics["cross_key.0"]) == 4
    assert cohort.join(translator.begin(later, options)) == 4
    decoded(cohort, found, steps=1)
    assert len(cohort.state.statics["cross_key.0"]) == 6
    cohort.drop({0})  # 5 of 6 still read: kept as they are
    assert len(cohort.state.statics["cross_key.0"]) == 6
    cohort.drop({1})  # 4 of 6: only those
    assert len(cohort.state.statics["cross_key.0"]) == 4
    decoded(cohort, found)
    for i in (2, 3, 4, 5):
        assert found[i].tokens == alone[i].tokens
        assert found[i].token_log_probs == alone[i].token_log_probs
