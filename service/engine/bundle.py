"""Reading a model bundle: the manifest, its files and their checksums, verified before use.

Every problem found is collected and reported in one BundleInvalid that names each file and
what is wrong with it, so a broken bundle is fixed in one round, not one error at a time.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pydantic import ValidationError

from service.engine.errors import EngineError
from service.engine.manifest import MANIFEST_FILE, SCHEMA_VERSION, GraphSpec, Manifest


class BundleInvalid(EngineError):
    code = "bundle_invalid"

    def __init__(self, bundle: Path, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"bundle {bundle} is invalid: " + "; ".join(problems))


@dataclass(frozen=True)
class Bundle:
    path: Path
    manifest: Manifest

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def name(self) -> str:
        return self.manifest.name


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _read_manifest(path: Path) -> Manifest:
    manifest_path = path / MANIFEST_FILE
    if not manifest_path.is_file():
        raise BundleInvalid(path, [f"{MANIFEST_FILE}: missing"])
    text = manifest_path.read_text(encoding="utf-8")
    try:
        return Manifest.model_validate_json(text)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "(root)"
            if where == "schema_version":
                problems.append(f"{MANIFEST_FILE}: schema_version must be {SCHEMA_VERSION} ({err['msg']})")
            else:
                problems.append(f"{MANIFEST_FILE}: {where}: {err['msg']}")
        raise BundleInvalid(path, problems) from exc


def _check_files(path: Path, manifest: Manifest) -> list[str]:
    problems = []
    referenced = {manifest.graphs.encoder.file, manifest.graphs.decoder.file} | manifest.tokenizers.files()
    referenced |= {w.file for w in manifest.shared_weights}
    for name in sorted(referenced - set(manifest.files)):
        problems.append(f"{name}: used by the manifest but has no checksum entry")
    for w in manifest.shared_weights:
        entry = manifest.files.get(w.file)
        if entry is not None and w.offset + w.length > entry.size:
            problems.append(f"{w.file}: shared weight {w.decoder} ends at byte {w.offset + w.length}, past its end")
    for name, entry in sorted(manifest.files.items()):
        file = path / name
        if not file.is_file():
            problems.append(f"{name}: missing")
        elif file.stat().st_size != entry.size:
            problems.append(f"{name}: size {file.stat().st_size} bytes, manifest says {entry.size}")
        elif sha256_of(file) != entry.sha256:
            problems.append(f"{name}: sha256 mismatch (corrupted or replaced)")
    return problems


def load_bundle(path: str | Path) -> Bundle:
    """Read and verify a bundle directory: schema, files, sizes and checksums."""
    path = Path(path)
    if not path.is_dir():
        raise BundleInvalid(path, ["not a directory"])
    manifest = _read_manifest(path)
    problems = _check_files(path, manifest)
    if problems:
        raise BundleInvalid(path, problems)
    return Bundle(path=path, manifest=manifest)


class _NodeArg(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def shape(self) -> list[int | str | None]: ...


_ORT_TYPES = {"tensor(int64)": "int64", "tensor(float)": "float32", "tensor(bool)": "bool"}


def graph_io_problems(spec: GraphSpec, inputs: list[_NodeArg], outputs: list[_NodeArg]) -> list[str]:
    """Differences between a graph's declared I/O and what an onnxruntime session really has."""
    problems = []
    for kind, declared, actual in (("input", spec.inputs, inputs), ("output", spec.outputs, outputs)):
        real = {a.name: a for a in actual}
        for name in sorted(set(real) - {t.name for t in declared}):
            problems.append(f"{spec.file}: {kind} {name!r} is in the graph but not in the manifest")
        for tensor in declared:
            arg = real.get(tensor.name)
            if arg is None:
                problems.append(f"{spec.file}: {kind} {tensor.name!r} is in the manifest but not in the graph")
                continue
            dtype = _ORT_TYPES.get(arg.type, arg.type)
            if dtype != tensor.dtype:
                problems.append(f"{spec.file}: {kind} {tensor.name!r} is {dtype}, manifest says {tensor.dtype}")
            if len(arg.shape) != len(tensor.shape) or any(
                isinstance(d, int) and d != a for d, a in zip(tensor.shape, arg.shape, strict=False)
            ):
                problems.append(
                    f"{spec.file}: {kind} {tensor.name!r} has shape {arg.shape}, manifest says {tensor.shape}"
                )
    return problems
