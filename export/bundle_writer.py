"""Writing a bundle directory: checksums, manifest, atomic placement, and a final load.

A bundle is staged in a temporary directory beside its destination, verified with the
service's own loader, and only then renamed into place, so a reader never sees half a bundle.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from export.shared_weights import share_weights
from service.engine.bundle import Bundle, load_bundle, sha256_of
from service.engine.manifest import MANIFEST_FILE, FileEntry, Graphs, Manifest
from service.engine.translator import Translator


class ExportError(RuntimeError):
    """An export that must not produce a bundle; the message names every problem."""


def staging_dir(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    staged.chmod(0o755)  # mkdtemp makes it private; a bundle is read by the service's own user
    return staged


def write_manifest(directory: Path, fields: dict[str, Any]) -> Manifest:
    """Store the weights both graphs hold once, checksum every file in `directory` and write
    manifest.json describing them."""
    graphs = Graphs.model_validate(fields["graphs"])
    shared = share_weights(directory, graphs.encoder.file, graphs.decoder.file)
    files = {
        p.name: FileEntry(sha256=sha256_of(p), size=p.stat().st_size)
        for p in sorted(directory.iterdir())
        if p.is_file() and p.name != MANIFEST_FILE
    }
    manifest = Manifest(**{**fields, "shared_weights": shared}, files=files)
    (directory / MANIFEST_FILE).write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return manifest


def check_destination(out: Path, force: bool) -> None:
    if out.exists() and not force:
        raise ExportError(f"{out} exists; pass --force to overwrite it")


def place(staged: Path, out: Path, force: bool) -> Bundle:
    """Verify the staged bundle with the service's loader, then move it to `out` atomically."""
    Translator(load_bundle(staged))  # schema, checksums, sessions and graph I/O, as the service does
    check_destination(out, force)
    backup = None
    if out.exists():
        backup = out.with_name(f".{out.name}.old")
        shutil.rmtree(backup, ignore_errors=True)
        os.replace(out, backup)
    os.replace(staged, out)
    if backup is not None:
        shutil.rmtree(backup)
    return load_bundle(out)
