"""A graph file read without its weights: the structure a rewrite needs, with each large initializer
pointing back into the file as external data, where onnxruntime reads it.

Reading a graph with the onnx package and serializing it again held its weights twice, on top of what
onnxruntime then reads: an OPUS-MT-size fp32 decoder peaked at 941 MB loading fused against 484 as
written. Here the file is mapped, its protobuf walked field by field, and each initializer's
`raw_data` (field 9 of TensorProto) of `threshold` bytes or more is replaced by the external-data
entries naming its offset and length in the same file. The weights' pages are never touched.

Only the fields on the way are decoded (ModelProto.graph = 7, GraphProto.initializer = 5,
TensorProto.name = 8, raw_data = 9, data_location = 14); every other field is copied as it is.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from pathlib import Path

GRAPH, INITIALIZER = 7, 5  # ModelProto.graph, GraphProto.initializer
NAME, RAW_DATA, EXTERNAL_DATA, DATA_LOCATION = 8, 9, 13, 14  # TensorProto
VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5  # wire types
EXTERNAL = 1  # TensorProto.DataLocation


class GraphBytesError(ValueError):
    """The file is not a protobuf this walker reads (the onnx package then says what is wrong)."""


@dataclass(frozen=True)
class Structure:
    model: bytes  # the ModelProto, its large weights external data in `location`
    external: frozenset[str]  # initializers that were external data already (shared weights)


def _varint(data: mmap.mmap | bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise GraphBytesError("a truncated or overlong varint")
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return value, pos
        shift += 7


def _encoded(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return _encoded(number << 3 | LENGTH) + _encoded(len(payload)) + payload


def _fields(data: mmap.mmap, start: int, end: int) -> list[tuple[int, int, int, int, int]]:
    """(field number, wire type, where the field starts, where its value starts, where it ends)."""
    found, pos = [], start
    while pos < end:
        head = pos
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == VARINT:
            _, after = _varint(data, pos)
        elif wire == LENGTH:
            size, pos = _varint(data, pos)
            after = pos + size
        elif wire in (FIXED64, FIXED32):
            after = pos + (8 if wire == FIXED64 else 4)
        else:
            raise GraphBytesError(f"wire type {wire} (groups) in field {number}")
        if after > end:
            raise GraphBytesError(f"field {number} runs past its message")
        found.append((number, wire, head, pos, after))
        pos = after
    return found


def _tensor(data: mmap.mmap, start: int, end: int, location: str, threshold: int) -> tuple[bytes, str, bool]:
    """The TensorProto, its raw_data external if large; its name; whether it was external already."""
    out, name, external, moved = bytearray(), "", False, None
    for number, wire, head, value, after in _fields(data, start, end):
        if number == NAME and wire == LENGTH:
            name = bytes(data[value:after]).decode("utf-8", "replace")
        if number == DATA_LOCATION and wire == VARINT:
            external = _varint(data, value)[0] == EXTERNAL
        if number == RAW_DATA and wire == LENGTH and after - value >= threshold:
            moved = (value, after - value)
            continue
        out += data[head:after]
    if moved is not None and not external:
        for key, text in (("location", location), ("offset", str(moved[0])), ("length", str(moved[1]))):
            out += _field(EXTERNAL_DATA, _field(1, key.encode()) + _field(2, text.encode()))
        out += _encoded(DATA_LOCATION << 3 | VARINT) + _encoded(EXTERNAL)
    return bytes(out), name, external


def _graph(data: mmap.mmap, start: int, end: int, location: str, threshold: int) -> tuple[bytes, set[str]]:
    out, external = bytearray(), set[str]()
    for number, wire, head, value, after in _fields(data, start, end):
        if number == INITIALIZER and wire == LENGTH:
            tensor, name, was_external = _tensor(data, value, after, location, threshold)
            out += _field(INITIALIZER, tensor)
            if was_external:
                external.add(name)
        else:
            out += data[head:after]
    return bytes(out), external


def structure(path: Path, threshold: int = 4096) -> Structure:
    """The graph at `path`, its initializers of `threshold` bytes or more left in the file: load it
    with the session option `session.model_external_initializers_file_folder_path` set to its folder."""
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        out, external = bytearray(), set[str]()
        for number, wire, head, value, after in _fields(data, 0, len(data)):
            if number == GRAPH and wire == LENGTH:
                graph, external = _graph(data, value, after, path.name, threshold)
                out += _field(GRAPH, graph)
            else:
                out += data[head:after]
        return Structure(bytes(out), frozenset(external))
