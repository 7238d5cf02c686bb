"""The search with scripted log-probs and no model at all."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest

from service.engine import native
from service.engine.beam import BeamDecode, top_per_row
from service.engine.search import (
    Cohort,
    Hypothesis,
    Scoring,
    beam_search,
    coverage_penalty,
    greedy_search,
    length_penalty,
    suppress,
)

BOS, EOS, V = 2, 3, 8


class ScriptedModel:
    """State = each row's token history. Log-probs come from a table keyed by history (falling
    back to a pseudo-random distribution seeded by the history), and the "attention" of a step
    encodes the history length and sum, so reordering mistakes show up in the attention rows."""

    def __init__(self, table: dict[tuple[int, ...], dict[int, float]] | None = None, seed: int = 0) -> None:
        self.table = table or {}
        self.seed = seed
        self.calls = 0

    def distribution(self, history: tuple[int, ...]) -> np.ndarray:
        if history in self.table:
            probs = np.full(V, 1e-6)
            for token, p in self.table[history].items():
                probs[token] = p
        else:
            digest = hashlib.sha256(repr((self.seed, history)).encode()).digest()
            probs = np.frombuffer(digest[:V], dtype=np.uint8).astype(np.float64) + 1.0
            probs[EOS] *= 0.3 + 0.25 * len(history)  # EOS grows likelier with length
            probs[BOS] = 1e-9
        return np.log(probs / probs.sum()).astype(np.float32)

    @staticmethod
    def attention_of(history: tuple[int, ...]) -> np.ndarray:
        return np.array([len(history), sum(history)], dtype=np.float32)

    def step(self, tokens: np.ndarray, state: list[tuple[int, ...]]):
        self.calls += 1
        histories = [(*h, int(t)) for h, t in zip(state, tokens, strict=True)]
        log_probs = np.stack([self.distribution(h[1:]) for h in histories])  # history without BOS
        attention = np.stack([self.attention_of(h) for h in histories])
        return log_probs, attention, histories

    def reorder(self, state: list[tuple[int, ...]], rows: np.ndarray) -> list[tuple[int, ...]]:
        return [state[int(r)] for r in rows]


def initial(batch: int) -> list[tuple[int, ...]]:
    return [()] * batch


def check_attention(hyp: Hypothesis) -> None:
    """Row t of a hypothesis' attention must be the one computed on its own prefix."""
    prefix: tuple[int, ...] = (BOS,)
    for t, token in enumerate(hyp.tokens):
        np.testing.assert_array_equal(hyp.attention[t], ScriptedModel.attention_of(prefix))
        prefix = (*prefix, token)


def test_greedy_follows_the_argmax_and_stops_at_eos() -> None:
    model = ScriptedModel({(): {5: 0.6, 6: 0.4}, (5,): {4: 0.9, EOS: 0.1}, (5, 4): {EOS: 0.99, 4: 0.01}})
    [hyp] = greedy_search(model, initial(1), np.array([10]), BOS, EOS)
    assert hyp.tokens == [5, 4, EOS]
    assert hyp.finished
    assert hyp.token_log_probs == pytest.approx(list(np.log([0.6, 0.9, 0.99])), abs=1e-4)
    assert hyp.score == pytest.approx(hyp.log_prob)
    check_attention(hyp)


def test_beam_finds_the_better_sequence_greedy_misses() -> None:
    # Greedy takes 5 (0.6) and then has only weak continuations; 6 (0.4) leads to a sure EOS.
    table = {
        (): {5: 0.6, 6: 0.4},
        (5,): {4: 0.3, 7: 0.3, 1: 0.4},
        (5, 1): {EOS: 0.5, 4: 0.5},
        (6,): {EOS: 0.99},
    }
    [greedy] = greedy_search(ScriptedModel(table), initial(1), np.array([3]), BOS, EOS)
    [[best]] = beam_search(ScriptedModel(table), initial(1), np.array([3]), BOS, EOS, beam_size=2)
    assert greedy.tokens == [5, 1, EOS]
    assert best.tokens == [6, EOS]
    assert best.score > greedy.score
    check_attention(best)


def test_max_length_cuts_and_marks_unfinished() -> None:
    model = ScriptedModel({(): {5: 0.9}, (5,): {5: 0.9}, (5, 5): {5: 0.9}})
    [hyp] = greedy_search(model, initial(1), np.array([2]), BOS, EOS)
    assert hyp.tokens == [5, 5] and not hyp.finished
    [[beam_hyp]] = beam_search(model, initial(1), np.array([2]), BOS, EOS, beam_size=3)
    assert len(beam_hyp.tokens) == 2 and not beam_hyp.finished


@pytest.mark.parametrize("seed", range(20))
def test_beam_size_one_equals_greedy(seed: int) -> None:
    max_lengths = np.array([3, 9, 6, 12])
    greedy = greedy_search(ScriptedModel(seed=seed), initial(4), max_lengths, BOS, EOS, Scoring(alpha=0.6))
    beam = beam_search(
        ScriptedModel(seed=seed), initial(4), max_lengths, BOS, EOS, beam_size=1, scoring=Scoring(alpha=0.6)
    )
    for g, [b] in zip(greedy, beam, strict=True):
        assert g.tokens == b.tokens
        assert g.finished == b.finished
        assert g.score == pytest.approx(b.score, abs=1e-6)
        np.testing.assert_allclose(g.token_log_probs, b.token_log_probs, atol=1e-6)
        np.testing.assert_array_equal(g.attention, b.attention)


@pytest.mark.parametrize("seed", range(10))
def test_beam_rows_are_reordered_consistently(seed: int) -> None:
    model = ScriptedModel(seed=seed)
    results = beam_search(
        model, initial(3), np.array([8, 5, 10]), BOS, EOS, beam_size=4, n_best=3, scoring=Scoring(alpha=0.6)
    )
    for nbest in results:
        assert 1 <= len(nbest) <= 3
        assert [h.score for h in nbest] == sorted((h.score for h in nbest), reverse=True)
        assert len({tuple(h.tokens) for h in nbest}) == len(nbest)
        for hyp in nbest:
            check_attention(hyp)
            # log-probs recorded per token are the model's own for that prefix
            prefix: tuple[int, ...] = ()
            for token, lp in zip(hyp.tokens, hyp.token_log_probs, strict=True):
                assert lp == pytest.approx(float(model.distribution(prefix)[token]), abs=1e-6)
                prefix = (*prefix, token)
            assert hyp.score == pytest.approx(hyp.log_prob / length_penalty(len(hyp.tokens), 0.6), abs=1e-5)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_a_batch_gives_what_each_sentence_gives_alone(beam_size: int) -> None:
    max_lengths = np.array([4, 11, 7])
    batch = beam_search(ScriptedModel(seed=3), initial(3), max_lengths, BOS, EOS, beam_size=beam_size, n_best=1)
    for i, length in enumerate(max_lengths):
        # every sentence in this batch shares the scripted distribution, so only max length differs
        [alone] = beam_search(ScriptedModel(seed=3), initial(1), np.array([length]), BOS, EOS, beam_size=beam_size)
        assert batch[i][0].tokens == alone[0].tokens
        assert batch[i][0].score == pytest.approx(alone[0].score)


def test_beam_is_at_least_as_good_as_greedy_on_average() -> None:
    gains = []
    for seed in range(30):
        [g] = greedy_search(ScriptedModel(seed=seed), initial(1), np.array([10]), BOS, EOS)
        [[b]] = beam_search(ScriptedModel(seed=seed), initial(1), np.array([10]), BOS, EOS, beam_size=5)
        gains.append(b.score - g.score)
    assert min(gains) >= -1e-6 or np.mean(gains) > 0


def test_n_best_cannot_exceed_the_beam() -> None:
    with pytest.raises(ValueError, match="n_best"):
        beam_search(ScriptedModel(), initial(1), np.array([5]), BOS, EOS, beam_size=2, n_best=3)


def test_finished_rows_leave_the_batch() -> None:
    # Sentence 0 may take 1 token, sentence 1 up to 30: the model sees ever fewer rows.
    seen_rows: list[int] = []

    class Counting(ScriptedModel):
        def step(self, tokens, state):
            seen_rows.append(len(tokens))
            return super().step(tokens, state)

    greedy_search(Counting(seed=1), initial(2), np.array([1, 30]), BOS, EOS)
    assert seen_rows[0] == 2 and all(n == 1 for n in seen_rows[1:])


def test_length_penalty() -> None:
    assert length_penalty(7, 0.0) == 1.0
    assert length_penalty(1, 1.0) == pytest.approx(1.0)
    assert length_penalty(7, 0.6) == pytest.approx(2.0**0.6)


def test_coverage_penalty_counts_unattended_real_tokens_only() -> None:
    full = np.array([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]])  # (T, S); the last column is padding
    assert coverage_penalty(full, 0.2) == 0.0
    dropped = np.array([[0.9, 0.1, 0.0], [0.9, 0.1, 0.0], [0.9, 0.1, 0.0]])  # token 1 got 0.3 in all
    assert coverage_penalty(dropped, 0.2) == pytest.approx(0.2 * np.log(0.3))  # over-coverage is capped at 1
    assert coverage_penalty(dropped, 0.0) == 0.0


class TwoWordSource(ScriptedModel):
    """Two source tokens. The step fed token 5 attends to source token 0, fed 6 to source token 1,
    fed anything else (BOS) evenly."""

    @staticmethod
    def attention_of(history: tuple[int, ...]) -> np.ndarray:
        last = history[-1]
        return np.array({5: [1.0, 0.0], 6: [0.0, 1.0]}.get(last, [0.5, 0.5]), dtype=np.float32)


def test_coverage_ranks_down_a_hypothesis_that_drops_a_word() -> None:
    # [5, EOS] is likelier but never attends to source token 1; [5, 6, EOS] covers both.
    table = {(): {5: 0.9}, (5,): {EOS: 0.6, 6: 0.4}, (5, 6): {EOS: 0.9}}

    def cov(attention: np.ndarray) -> float:
        return coverage_penalty(attention, 1.0)

    [[plain]] = beam_search(TwoWordSource(table), initial(1), np.array([5]), BOS, EOS, beam_size=2)
    [[covered]] = beam_search(
        TwoWordSource(table), initial(1), np.array([5]), BOS, EOS, beam_size=2, scoring=Scoring(coverage=cov)
    )
    assert plain.tokens == [5, EOS]
    assert covered.tokens == [5, 6, EOS]
    [greedy] = greedy_search(TwoWordSource(table), initial(1), np.array([5]), BOS, EOS, Scoring(coverage=cov))
    assert greedy.tokens == [5, EOS] and greedy.score < greedy.log_prob  # greedy's choice stays; its score pays


TRANSFORMERS = Scoring(alpha=1.0, length_penalty="power", stopping="transformers")


def test_transformers_stopping_keeps_looking_for_a_longer_better_hypothesis() -> None:
    # [EOS] ends first, but under |Y| ** 1.0 the longer [5, 6, EOS] scores better; transformers'
    # rule waits for beam-size finished hypotheses before it may stop, the best-finished rule does not.
    table = {(): {EOS: 0.55, 5: 0.45}, (5,): {6: 0.9}, (5, 6): {EOS: 0.9}}
    [[first]] = beam_search(ScriptedModel(table), initial(1), np.array([6]), BOS, EOS, 2, 1, Scoring(alpha=1.0))
    assert first.tokens == [EOS]
    [[best, runner_up]] = beam_search(ScriptedModel(table), initial(1), np.array([6]), BOS, EOS, 2, 2, TRANSFORMERS)
    assert best.tokens == [5, 6, EOS] and runner_up.tokens == [EOS]
    assert best.score == pytest.approx(best.log_prob / 3) and runner_up.score == pytest.approx(np.log(0.55), abs=1e-4)


@pytest.mark.parametrize("seed", range(10))
def test_transformers_stopping_with_beam_one_is_greedy(seed: int) -> None:
    max_lengths = np.array([3, 9, 6, 12])
    greedy = greedy_search(ScriptedModel(seed=seed), initial(4), max_lengths, BOS, EOS, TRANSFORMERS)
    beam = beam_search(ScriptedModel(seed=seed), initial(4), max_lengths, BOS, EOS, 1, 1, TRANSFORMERS)
    for g, [b] in zip(greedy, beam, strict=True):
        assert g.tokens == b.tokens and g.score == pytest.approx(b.score, abs=1e-6)


def test_forced_eos_ends_every_output_at_its_cap() -> None:
    model = ScriptedModel({(): {5: 0.9}, (5,): {5: 0.9}, (5, 5): {5: 0.9}})
    forced = Scoring(forced_eos=True)
    [hyp] = greedy_search(model, initial(1), np.array([3]), BOS, EOS, forced)
    assert hyp.tokens == [5, 5, EOS] and hyp.finished
    assert hyp.token_log_probs[-1] == 0.0  # transformers sets the forced token's score to 0
    [[beam_hyp]] = beam_search(model, initial(1), np.array([3]), BOS, EOS, 2, 1, forced)
    assert beam_hyp.tokens == [5, 5, EOS] and beam_hyp.finished


def test_suppressing_with_renormalisation_is_a_log_softmax_over_the_rest() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, V)).astype(np.float32)
    log_probs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    out = suppress(log_probs.copy(), (0, 2), renormalize=True)
    masked = logits.copy()
    masked[:, [0, 2]] = -np.inf
    expected = masked - np.log(np.exp(masked).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(out, expected, atol=1e-6)
    plain = suppress(log_probs.copy(), (0, 2))
    assert np.isneginf(plain[:, [0, 2]]).all() and np.array_equal(plain[:, 1], log_probs[:, 1])


@pytest.mark.parametrize("count", [1, 3, 12])
def test_suppressing_few_or_many_columns_forbids_exactly_those(count: int) -> None:
    """Up to FEW_COLUMNS are written one by one, more with one fancy-indexed write: the same result."""
    log_probs = np.random.default_rng(count).normal(size=(4, 40)).astype(np.float32)
    columns = tuple(range(1, 3 * count + 1, 3))
    out = suppress(log_probs.copy(), columns)
    expected = log_probs.copy()
    expected[:, list(columns)] = -np.inf
    assert np.array_equal(out, expected)


def test_power_length_penalty_is_transformers() -> None:
    assert length_penalty(4, 1.0, "power") == 4.0
    assert length_penalty(4, 0.5, "power") == 2.0
    assert length_penalty(4, 0.0, "power") == 1.0


def test_no_repeat_ngram_bans_a_repeated_ngram() -> None:
    # the model loves 5 after anything: greedy writes 5 5 5 5 ...; with n=2 the pair (5, 5) may occur once
    table: dict[tuple[int, ...], dict[int, float]] = {(5,) * n: {5: 0.9, 6: 0.05} for n in range(6)}
    table[(5, 5, 6)] = {EOS: 0.9}
    [loop] = greedy_search(ScriptedModel(table), initial(1), np.array([6]), BOS, EOS)
    assert loop.tokens == [5, 5, 5, 5, 5, 5]
    [fixed] = greedy_search(ScriptedModel(table), initial(1), np.array([6]), BOS, EOS, Scoring(no_repeat_ngram=2))
    assert fixed.tokens == [5, 5, 6, EOS]
    [[beam]] = beam_search(ScriptedModel(table), initial(1), np.array([6]), BOS, EOS, 2, 1, Scoring(no_repeat_ngram=2))
    assert beam.tokens == [5, 5, 6, EOS]


def test_repetition_penalty_makes_written_tokens_less_likely() -> None:
    table = {(): {5: 0.9}, (5,): {5: 0.5, 6: 0.4}, (5, 6): {EOS: 0.9}}
    [plain] = greedy_search(ScriptedModel(table), initial(1), np.array([4]), BOS, EOS)
    assert plain.tokens[:2] == [5, 5]
    [penalised] = greedy_search(
        ScriptedModel(table), initial(1), np.array([4]), BOS, EOS, Scoring(repetition_penalty=1.5)
    )
    assert penalised.tokens == [5, 6, EOS]


@pytest.fixture(params=["C", "numpy"])
def selection(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """top_per_row by the C kernel, then with it out of the way (an install without a compiler)."""
    if request.param == "C" and native.available() is None:
        pytest.fail("the C kernel is not built: pip install -e . needs a C compiler (see pyproject.toml)")
    if request.param == "numpy":
        monkeypatch.setattr(native._switch, "declining", True)  # native.numpy_only() for the whole test
    return str(request.param)


@pytest.mark.parametrize(("rows", "vocab"), [(4, 6000), (40, 6000), (3, 65001), (2, 10), (3, 1000)])
def test_each_rows_best_tokens_are_found_whichever_way(rows: int, vocab: int, selection: str) -> None:
    """top_per_row (the C kernel; numpy's group search and, for a vocabulary under 2n groups, its
    stable sort) agrees with a full sort, -inf (suppressed tokens) and equal values among the best
    included; the columns come back ascending."""
    rng = np.random.default_rng(rows)
    n = n_top = min(8, vocab)
    values = rng.standard_normal((rows, vocab)).astype(np.float32)
    values[:, rng.choice(vocab, min(5, vocab - n), replace=False)] = -np.inf  # never at the boundary
    values[0, :n_top] = values[0].max() + 1  # equal values, all among the best
    got = top_per_row(values, n)
    order = np.lexsort((np.broadcast_to(np.arange(vocab), values.shape), -values), axis=1)  # by value, then column
    np.testing.assert_array_equal(got, np.sort(order[:, :n], axis=1))


@pytest.mark.parametrize("vocab", [6000, 1000, 10])
def test_equal_values_at_the_boundary_go_to_the_lower_columns_whatever_the_batch(vocab: int, selection: str) -> None:
    """A row's choice among equal values at the n-th place is its lowest columns, alone or beside
    other rows: batch invariance needs a rule, not whatever a partition leaves."""
    rng = np.random.default_rng(1)
    row = rng.standard_normal(vocab).astype(np.float32)
    tied = rng.choice(vocab, 6, replace=False)
    row[tied] = row.max() + 1  # six equal best values for n = 4
    others = rng.standard_normal((5, vocab)).astype(np.float32)
    alone = top_per_row(row[None], 4)
    batched = top_per_row(np.vstack([others[:2], row, others[2:]]), 4)[2:3]
    np.testing.assert_array_equal(alone, np.sort(tied)[:4][None])
    np.testing.assert_array_equal(batched, alone)


def test_the_kernel_and_numpy_choose_the_same_columns_on_many_ties() -> None:
    """Values on a coarse grid (ties everywhere, at every place), -inf among them, rows from 1 to
    40, n from 1 to 16: the C kernel's columns, by either of its paths, are numpy's, bit for bit."""
    if native.available() is None:
        pytest.fail("the C kernel is not built: pip install -e . needs a C compiler (see pyproject.toml)")
    rng = np.random.default_rng(3)
    cases = []
    for _ in range(60):
        rows, vocab, n = int(rng.integers(1, 41)), int(rng.integers(20, 9000)), int(rng.integers(1, 17))
        values = (np.round(rng.standard_normal((rows, vocab)) * 3) / 3).astype(np.float32)
        values[rng.random((rows, vocab)) < 0.01] = -np.inf
        cases.append((values, min(n, vocab)))
    by_kernel = [top_per_row(values, n) for values, n in cases]
    portable = []  # the kernel's path for CPUs without AVX2, on this one
    for values, n in cases:
        out = np.empty((len(values), n), np.int64)
        assert native._native.top_per_row(values, n, out, False)  # type: ignore[union-attr]
        portable.append(out)
    with native.numpy_only():
        by_numpy = [top_per_row(values, n) for values, n in cases]
    for got, want, scalar in zip(by_kernel, by_numpy, portable, strict=True):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(scalar, got)


def test_the_kernel_declines_what_it_does_not_take() -> None:
    """NaN rows, float64, n over 64 or over the columns: None (numpy answers them); bad buffers: a
    ValueError from the kernel, not a crash."""
    if native.available() is None:
        pytest.fail("the C kernel is not built: pip install -e . needs a C compiler (see pyproject.toml)")
    values = np.random.default_rng(4).standard_normal((3, 500)).astype(np.float32)
    assert native.top_per_row(values, 8) is not None
    with_nan = values.copy()
    with_nan[1, 321] = np.nan
    assert native.top_per_row(with_nan, 8) is None
    assert native.top_per_row(values.astype(np.float64), 8) is None
    assert native.top_per_row(values, 65) is None and native.top_per_row(values[:, :4], 8) is None
    out = np.empty((3, 8), np.int64)
    with pytest.raises(ValueError, match="float32"):
        native._native.top_per_row(values.astype(np.float64), 8, out)  # type: ignore[union-attr]
    with pytest.raises(ValueError, match=r"\(rows, n\)"):
        native._native.top_per_row(values, 8, np.empty((3, 7), np.int64))  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="contiguous"):
        native._native.top_per_row(values[:, ::2], 8, out)  # type: ignore[union-attr]


def test_rows_with_nan_or_none_take_the_partition(selection: str) -> None:
    """A row short of n values at its floor (NaN compares false) is answered as argpartition
    answers it, not with another row's columns; no rows, no columns."""
    rng = np.random.default_rng(2)
    values = rng.standard_normal((3, 6000)).astype(np.float32)
    values[1, :5990] = np.nan
    got = top_per_row(values, 8)
    assert got.shape == (3, 8) and (got >= 0).all() and (got < 6000).all()
    np.testing.assert_array_equal(got[0], np.sort(np.argsort(-values[0], kind="stable")[:8]))
    assert top_per_row(np.zeros((0, 6000), np.float32), 8).shape == (0, 8)


def test_equal_candidates_go_to_the_lower_row_then_the_lower_token() -> None:
    """Candidates of one score are ranked by row, then token, whichever sentence they are beside."""
    log_probs = np.log(np.array([0.4, 0.3, 0.2, 0.1, 0.0, 0.0, 0.0, 0.0], np.float32) + 1e-9)

    def candidates(sentences: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        decode = BeamDecode(np.full(sentences, 10), BOS, EOS, 2, 1, Scoring())
        decode.cum = np.zeros(2 * sentences)  # both beams alive with equal scores: every row ties
        decode.t = 1  # a step after the first, which feeds one row a sentence
        return decode._candidates(np.tile(log_probs, (2 * sentences, 1)))

    rows, tokens, scores = candidates(3)
    np.testing.assert_array_equal(rows, [[0, 1, 0, 1], [2, 3, 2, 3], [4, 5, 4, 5]])
    np.testing.assert_array_equal(tokens, np.tile([0, 0, 1, 1], (3, 1)))
    alone_rows, alone_tokens, alone_scores = candidates(1)
    np.testing.assert_array_equal(alone_rows[0], rows[1] - 2)  # sentence 1's rows start at 2
    np.testing.assert_array_equal(alone_tokens[0], tokens[1])
    np.testing.assert_array_equal(alone_scores[0], scores[1])


def assert_same_hypotheses(ours: list[Hypothesis], reference: list[Hypothesis]) -> None:
    assert len(ours) == len(reference)
    for h, r in zip(ours, reference, strict=True):
        assert (h.tokens, h.token_log_probs, h.score, h.finished) == (r.tokens, r.token_log_probs, r.score, r.finished)
        np.testing.assert_array_equal(h.attention, r.attention)


class OneByOne(BeamDecode):
    """The beam step as it reads: every sentence through `_advance`, one after another."""

    def _beams(
        self, ranked: tuple[np.ndarray, np.ndarray, np.ndarray], last: np.ndarray, log_probs: np.ndarray
    ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
        K, A = self.K, len(self.active)
        beams = (np.empty((A, K), np.int64), np.empty((A, K), np.int64), np.empty((A, K)))
        going = np.zeros(A, bool)
        self._one_by_one(np.arange(A), ranked, last, log_probs, beams, going)
        return beams, going


@pytest.mark.parametrize(
    "scoring",
    [Scoring(), Scoring(coverage=lambda a: coverage_penalty(a, 0.2)), Scoring(forced_eos=True),
     Scoring(no_repeat_ngram=2), TRANSFORMERS],
    ids=["plain", "coverage", "forced_eos", "no_repeat", "transformers"],
)  # fmt: skip
@pytest.mark.parametrize("n_best", [1, 3])
def test_the_vectorised_beam_step_takes_what_one_by_one_takes(scoring: Scoring, n_best: int) -> None:
    """Sentences none of whose best K candidates end are stepped all at once; every hypothesis,
    score and attention row must be what the step sentence by sentence gives."""
    max_lengths = np.array([3, 14, 7, 1, 12, 9, 5, 16])

    calls = {BeamDecode: 0, OneByOne: 0}

    def search(decode_class: type[BeamDecode]) -> list[list[Hypothesis]]:
        class Counted(decode_class):  # type: ignore[valid-type, misc]
            def _advance(self, *args: Any) -> Any:
                calls[decode_class] += 1
                return super()._advance(*args)

        decode = Counted(max_lengths, BOS, EOS, 3, n_best, scoring)
        return Cohort(ScriptedModel(seed=7), initial(len(max_lengths)), decode).run(len(max_lengths))

    for ours, reference in zip(search(BeamDecode), search(OneByOne), strict=True):
        assert_same_hypotheses(ours, reference)
    if scoring.stopping != "transformers":  # both ways were taken
        assert 0 < calls[BeamDecode] < calls[OneByOne]


class Eager(BeamDecode):
    """Every ended hypothesis rebuilt from the trace at once, as before they waited to be chosen."""

    def _hypothesis(self, *args: Any) -> Any:
        return self._built(super()._hypothesis(*args))


@pytest.mark.parametrize("n_best", [1, 3])
def test_hypotheses_rebuilt_when_chosen_are_those_rebuilt_when_they_end(n_best: int) -> None:
    """Without a coverage penalty an ended hypothesis is rebuilt only if its sentence keeps it. The
    trace it is rebuilt from must still say what it said when it ended, also after sentences left
    mid-search (their callers gone), which cuts the trace's newest rows."""
    max_lengths = np.array([9, 14, 7, 12, 16, 11])

    def search(decode_class: type[BeamDecode]) -> tuple[dict[int, list[Hypothesis]], int]:
        decode = decode_class(max_lengths, BOS, EOS, 4, n_best, Scoring(alpha=0.6))
        cohort, steps = Cohort(ScriptedModel(seed=11), initial(len(max_lengths)), decode), 0
        results: dict[int, list[Hypothesis]] = {}
        waiting = 0  # ended hypotheses not rebuilt yet when sentences 1 and 4 leave
        while not cohort.done:
            results.update(cohort.step())
            steps += 1
            if steps == 5:
                waiting = sum(not isinstance(h, Hypothesis) for s in (0, 2, 3, 5) for h in decode.finished[s])
                cohort.drop({1, 4})
        return results, waiting

    (lazy, waiting), (eager, _) = search(BeamDecode), search(Eager)
    assert waiting > 0
    assert sorted(lazy) == sorted(eager) == [0, 2, 3, 5]
    for sentence, nbest in lazy.items():
        assert nbest
        assert_same_hypotheses(nbest, eager[sentence])
        for h in nbest:
            check_attention(h)


class KRowsFirst(BeamDecode):
    """The first step as it was: each sentence's row repeated K times, all but one dead (-inf)."""

    def __init__(self, max_lengths: np.ndarray, *args: Any) -> None:
        super().__init__(max_lengths, *args)
        B, K = len(max_lengths), self.K
        tr = self.trace
        first = (tr.last_token[0], tr.last_log_prob[0], np.arange(B * K))
        tr.last_token[0], tr.last_log_prob[0], tr.parent[0] = (np.repeat(first[0], K), np.repeat(first[1], K), first[2])
        self.tokens = tr.last_token[0]
        self.histories = [list(h) for h in self.histories for _ in range(K)]
        self.cum = np.tile(np.array([0.0] + [-np.inf] * (K - 1)), B)

    @property
    def rows_per(self) -> int:
        return self.K

    def start(self) -> np.ndarray:  # type: ignore[override]
        return np.repeat(np.arange(len(self.active)), self.K)


class RowCounting(ScriptedModel):
    def __init__(self, seed: int) -> None:
        super().__init__(seed=seed)
        self.rows: list[int] = []

    def step(self, tokens: np.ndarray, state: Any) -> Any:
        self.rows.append(len(tokens))
        return super().step(tokens, state)


@pytest.mark.parametrize(
    ("beam", "n_best", "scoring", "drop_first"),
    [
        (4, 1, Scoring(alpha=0.6), False),
        (4, 3, Scoring(alpha=0.6), True),
        (5, 2, Scoring(alpha=0.6, no_repeat_ngram=2), False),  # 2K candidates > V: fewer at the first step
        (9, 1, Scoring(), False),  # K > V: the first step cannot fill the beams
        (4, 1, Scoring(coverage=lambda a: coverage_penalty(a, 0.2), forced_eos=True), True),
        (3, 2, Scoring(stopping="transformers", repetition_penalty=1.3), False),
    ],
)
def test_the_first_step_feeds_one_row_a_sentence_and_finds_what_k_rows_found(
    beam: int, n_best: int, scoring: Scoring, drop_first: bool
) -> None:
    """All K beams of a sentence start from one BOS, so the first step feeds its one encoder row and
    spreads it to K rows after; the hypotheses are those of K rows fed from the start."""
    max_lengths = np.array([9, 14, 7, 12, 16, 11])

    def search(decode_class: type[BeamDecode]) -> tuple[dict[int, list[Hypothesis]], list[int]]:
        model = RowCounting(seed=5)
        cohort = Cohort(model, initial(len(max_lengths)), decode_class(max_lengths, BOS, EOS, beam, n_best, scoring))
        if drop_first:  # callers gone before any step
            cohort.drop({1, 4})
        results: dict[int, list[Hypothesis]] = {}
        while not cohort.done:
            results.update(cohort.step())
        return results, model.rows

    (ours, rows), (reference, reference_rows) = search(BeamDecode), search(KRowsFirst)
    sentences = 4 if drop_first else 6
    assert rows[0] == sentences and reference_rows[0] == sentences * beam
    assert rows[1] == reference_rows[1]
    assert sorted(ours) == sorted(reference) and len(ours) == sentences
    for sentence, nbest in ours.items():
        assert_same_hypotheses(nbest, reference[sentence])
        for h in nbest:
            check_attention(h)
