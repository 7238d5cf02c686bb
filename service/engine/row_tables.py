"""Embedding tables read by row from the bundle's file, never held whole (a manifest's `by_row`).

A tied embedding at OPUS-MT size is 65,001 x 512: 133 MB in fp32, 33 MB as int8, in every worker,
while a call reads a few hundred of its rows at most. The graphs take the table as an input (it
overrides the initializer of its name), so each call is fed only the rows its ids use, read with
`pread` from the bundle's file, and the ids renumbered to index them. The file's pages sit in the
kernel's page cache, shared by every worker on the machine and dropped under memory pressure; no
process maps them. Rows are copied bit for bit, so translations are what the whole table gives.
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from service.engine.manifest import SharedWeight
from service.engine.search import IntArray


class RowTable:
    """One (V, D) table at `offset` of `path`, read row by row."""

    def __init__(self, path: Path, weight: SharedWeight) -> None:
        self.vocabulary, *rest = weight.shape
        self.dtype = np.dtype(weight.dtype)
        self.row_shape = tuple(rest)
        self.row_bytes = weight.length // max(self.vocabulary, 1)
        self.offset = weight.offset
        self._fd = os.open(path, os.O_RDONLY)  # the file as loaded: a bundle replaced later is not read
        weakref.finalize(self, os.close, self._fd)

    def rows(self, ids: IntArray) -> tuple[npt.NDArray[Any], IntArray]:
        """(U, *row) the distinct rows `ids` use, in id order, and `ids` renumbered to index them."""
        unique, inverse = np.unique(ids, return_inverse=True)
        if len(unique) and (unique[0] < 0 or unique[-1] >= self.vocabulary):
            bad = int(unique[0] if unique[0] < 0 else unique[-1])
            raise ValueError(f"id {bad} is outside the table's {self.vocabulary} rows")
        table = np.empty((len(unique), *self.row_shape), dtype=self.dtype)
        flat = table.reshape(len(unique), -1)
        for i, row in enumerate(unique.tolist()):
            got = os.preadv(self._fd, [flat[i]], self.offset + row * self.row_bytes)
            if got != self.row_bytes:
                raise OSError(f"row {row}: read {got} of {self.row_bytes} bytes (the file is shorter than it was)")
        return table, inverse.reshape(ids.shape).astype(ids.dtype, copy=False)


def placeholder(weight: SharedWeight) -> npt.NDArray[Any]:
    """One zero row in the table's place: what a session holds for a table it is always fed."""
    return np.zeros((1, *weight.shape[1:]), dtype=np.dtype(weight.dtype))


def fed(tables: dict[str, tuple[str, RowTable]], feeds: dict[str, Any]) -> dict[str, Any]:
    """`feeds` with each table's rows for its ids input, and those ids renumbered.
    `tables`: ids input -> (table input, table)."""
    if not tables:
        return feeds
    feeds = dict(feeds)
    for ids_name, (table_name, table) in tables.items():
        feeds[table_name], feeds[ids_name] = table.rows(np.asarray(feeds[ids_name]))
    return feeds
