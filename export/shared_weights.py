"""Weights both graphs hold, stored once: a tied embedding is the encoder's and the decoder's.

A Marian checkpoint (OPUS-MT) ties its source and target embeddings: the two graphs each carried
the same 65,001 x 512 table (133 MB in fp32, 33 MB as int8). `share_weights` finds initializers
of identical type, shape and bytes in both graphs, writes each once to SHARED_FILE and makes both
graphs' initializers point at it (ONNX external data: standard, so onnxruntime, onnx and netron
read the graphs as they are). The manifest lists them (`shared_weights`), and the service hands
both sessions one buffer.

A shared table that each graph reads only by a Gather of its input ids is also made an input of
each graph (`by_row`): the service then reads from the file only the rows a call's ids use, and a
worker holds none of the table (OPUS-MT size: 133 MB fp32, 33 MB int8). An input of an
initializer's name overrides it in ONNX, so a reader that feeds nothing gets the whole table.

It runs on every manifest write (bundle_writer.write_manifest), so any
tool that rewrites a graph gets its sharing back: the entries are read off the graphs themselves.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import onnx
from google.protobuf.message import DecodeError
from onnx.external_data_helper import load_external_data_for_model

from service.engine.manifest import RowIds, SharedWeight

SHARED_FILE = "shared.weights"
MIN_BYTES = 1 << 20  # smaller tensors are not worth a second file
ALIGN = 4096  # each tensor starts on a page: a reader may map the file
DTYPES: dict[int, Literal["float32", "uint8", "int8"]] = {
    onnx.TensorProto.FLOAT: "float32",
    onnx.TensorProto.UINT8: "uint8",
    onnx.TensorProto.INT8: "int8",
}
ROLES = ("encoder", "decoder")


def share_weights(directory: Path, encoder: str, decoder: str) -> list[SharedWeight]:
    """Store the weights both graphs hold once; what is shared now (none: graphs left inline)."""
    files = [directory / encoder, directory / decoder]
    if not all(f.is_file() for f in files):
        return []
    try:
        models = [onnx.load(str(f), load_external_data=False) for f in files]
    except DecodeError:  # not a graph: nothing to share, and the loader names it
        return []
    regions = [_regions(m) for m in models]
    if not _inline_pairs(*models) and regions[0].keys() == regions[1].keys():
        if not regions[0]:  # nothing shared: no file (a stale copy goes)
            (directory / SHARED_FILE).unlink(missing_ok=True)
        if _read_by_row(models[0], models[1], regions):  # a bundle shared before tables were read by row
            for model, file in zip(models, files, strict=True):
                onnx.save(model, str(file))
        return _entries(models[0], models[1])  # as the last write left them
    for model in models:  # rewrite: every tensor back inline, then shared anew
        load_external_data_for_model(model, str(directory))
    pairs = _inline_pairs(*models)
    written = directory / f".{SHARED_FILE}.new"
    with written.open("wb") as out:
        for a, b in pairs:
            out.write(b"\0" * (-out.tell() % ALIGN))
            offset, data = out.tell(), a.raw_data
            out.write(data)
            for tensor in (a, b):
                _point_at(tensor, offset, len(data))
    _read_by_row(models[0], models[1], [_regions(m) for m in models])
    for model, file in zip(models, files, strict=True):
        onnx.save(model, str(file))
    if pairs:
        os.replace(written, directory / SHARED_FILE)
    else:
        written.unlink()
        (directory / SHARED_FILE).unlink(missing_ok=True)
    return _entries(models[0], models[1])


Pair = tuple[onnx.TensorProto, onnx.TensorProto]


def _inline_pairs(encoder: onnx.ModelProto, decoder: onnx.ModelProto) -> list[Pair]:
    """(encoder tensor, decoder tensor) with the same type, shape and bytes, held inline by both."""
    index = {
        (t.data_type, tuple(t.dims), t.raw_data): t
        for t in encoder.graph.initializer
        if t.data_type in DTYPES and len(t.raw_data) >= MIN_BYTES
    }
    pairs = []
    for t in decoder.graph.initializer:
        match = index.pop((t.data_type, tuple(t.dims), t.raw_data), None) if len(t.raw_data) >= MIN_BYTES else None
        if match is not None:
            pairs.append((match, t))
    return pairs


def _point_at(tensor: onnx.TensorProto, offset: int, length: int) -> None:
    tensor.ClearField("raw_data")
    tensor.data_location = onnx.TensorProto.EXTERNAL
    del tensor.external_data[:]
    for key, value in (("location", SHARED_FILE), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


def _regions(model: onnx.ModelProto) -> dict[tuple[int, int], onnx.TensorProto]:
    """(offset, length) of SHARED_FILE -> the initializer that points there."""
    regions = {}
    for t in model.graph.initializer:
        ref = {e.key: e.value for e in t.external_data}
        if t.data_location == onnx.TensorProto.EXTERNAL and ref.get("location") == SHARED_FILE:
            regions[(int(ref["offset"]), int(ref["length"]))] = t
    return regions


def _row_ids(model: onnx.ModelProto, table: str) -> str | None:
    """The graph input that indexes `table`, when `table` is read only by one Gather of that input's ids
    and the ids by nothing else but their shape; None otherwise (the table is then held whole)."""
    graph = model.graph
    if any(a.g.node or a.graphs for n in graph.node for a in n.attribute):
        return None  # subgraphs could read either one
    users = [n for n in graph.node if table in n.input]
    if len(users) != 1 or users[0].op_type != "Gather" or users[0].input[0] != table:
        return None
    if any(a.name == "axis" and a.i != 0 for a in users[0].attribute):
        return None
    ids = users[0].input[1]
    is_input = _is_input(model, ids) and ids not in {o.name for o in graph.output}
    # renumbered ids keep their shape, so a Shape of them may read them too: the Gather is the one other reader
    readers = [n for n in graph.node if ids in n.input]
    return ids if is_input and sum(n.op_type != "Shape" for n in readers) == 1 else None


def _is_input(model: onnx.ModelProto, name: str) -> bool:
    return any(i.name == name for i in model.graph.input)


def _read_by_row(
    encoder: onnx.ModelProto, decoder: onnx.ModelProto, regions: list[dict[tuple[int, int], onnx.TensorProto]]
) -> bool:
    """Make each shared table that both graphs read by row an input of each graph too (ONNX lets an
    input override an initializer of its name), so a reader can feed only the rows it needs; whether
    anything changed."""
    changed = False
    for key, enc in regions[0].items():
        dec = regions[1].get(key)
        if dec is None or _row_ids(encoder, enc.name) is None or _row_ids(decoder, dec.name) is None:
            continue
        for model, tensor in ((encoder, enc), (decoder, dec)):
            if not _is_input(model, tensor.name):
                shape = ["table_rows", *tensor.dims[1:]]
                model.graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, shape))
                changed = True
    return changed


def _entries(encoder_model: onnx.ModelProto, decoder_model: onnx.ModelProto) -> list[SharedWeight]:
    """The regions both graphs point at, and how each is read."""
    encoder, decoder = _regions(encoder_model), _regions(decoder_model)
    entries = []
    for (offset, length), t in sorted(encoder.items()):
        other = decoder.get((offset, length))
        if other is None:
            continue
        by_row = None
        if _is_input(encoder_model, t.name) and _is_input(decoder_model, other.name):
            ids = _row_ids(encoder_model, t.name), _row_ids(decoder_model, other.name)
            by_row = RowIds(encoder=ids[0], decoder=ids[1]) if ids[0] and ids[1] else None
        entries.append(
            SharedWeight(
                file=SHARED_FILE,
                offset=offset,
                length=length,
                dtype=DTYPES[t.data_type],
                shape=list(t.dims),
                encoder=t.name,
                decoder=other.name,
                by_row=by_row,
            )
        )
    return entries
