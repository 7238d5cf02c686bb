"""The order rows keep when some leave: gaps filled by the last rows, the rest in place."""

from __future__ import annotations

import pytest

from service.engine.row_order import gap_filling


@pytest.mark.parametrize(
    ("kept", "expected"),
    [
        ([0, 1, 3, 4, 6, 7], [0, 1, 6, 3, 4, 7]),  # places 2 and 5 left: the last two fill them
        ([0, 1, 2], [0, 1, 2]),  # the last rows left: nothing moves
        ([1, 2, 3], [3, 1, 2]),
        ([5], [5]),
        ([], []),
    ],
)
def test_the_places_of_rows_that_left_are_taken_by_the_last_ones(kept: list[int], expected: list[int]) -> None:
    order = gap_filling(kept)
    assert order == expected
    assert sorted(order) == kept  # every kept row once
    moved = [b for place, b in enumerate(order) if b != place]
    assert len(moved) == sum(b >= len(kept) for b in kept)  # only rows from past the new end move
