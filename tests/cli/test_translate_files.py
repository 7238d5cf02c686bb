"""`attention-mt translate` on files: line for line, blank lines kept, bad lines reported, streamed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import cli

pytestmark = pytest.mark.slow
SCRIPT = Path(sys.executable).parent / "attention-mt"


def test_a_file_line_for_line(bundle_dir: Path, tmp_path: Path) -> None:
    lines = [
        "Tom chases Jerry.",
        "",
        "Mary likes John today. Bob helps Alice again.",  # two sentences on one line: one output line
        "Tom \x07 chases Jerry.",  # a control character: this line fails, the run goes on
        "   ",
        "Bob calls Mary.",
    ]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    args = ("--model", "en-zh", "--bundles", bundle_dir, "--beam", "1")
    result = cli("translate", "--input", source, "--output", out, *args)
    assert result.returncode == 1  # one line failed
    assert "error: line 4 has control character U+0007" in result.stderr
    assert "1 of 6 lines failed: [4]" in result.stderr
    written = out.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(written) == len(lines)
    assert written[1] == written[3] == written[4] == ""  # blank stays blank; the failed line is empty
    alone = [cli("translate", line, *args).stdout.strip() for line in (lines[0], lines[5])]
    assert [written[0], written[5]] == alone
    assert written[2]  # the paragraph line is translated as two sentences, joined back on one line
    as_file = cli("translate", source, *args)  # a file named as TEXT is read as a file, with a note
    assert "is a file: translating its lines" in as_file.stderr and as_file.stdout.split("\n")[:-1] == written


def test_json_lines_keep_line_numbers(bundle_dir: Path, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("Tom chases Jerry.\n\nBob helps Alice.\n", encoding="utf-8")
    result = cli("translate", "--input", source, "--model", "en-zh", "--bundles", bundle_dir, "--json")
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["line"] for r in records] == [1, 2, 3] and records[1]["text"] == ""
    assert records[0]["segments"] and records[2]["target_tokens"]


def test_input_that_is_not_utf8_is_named(bundle_dir: Path, tmp_path: Path) -> None:
    source = tmp_path / "latin1.txt"
    source.write_bytes("Tom chases Jerry.\nCafé au lait.\n".encode("latin-1"))
    result = cli("translate", "--input", source, "--model", "en-zh", "--bundles", bundle_dir)
    assert result.returncode == 2
    assert "not UTF-8: line 2, byte offset 21 (0xe9)" in result.stderr
    assert result.stdout.splitlines()[0]  # what came before is written


def test_stdin_is_streamed_not_read_whole(bundle_dir: Path) -> None:
    """Translations of the first chunk come out while stdin is still open."""
    command = [str(SCRIPT), "translate", "--model", "en-zh", "--bundles", str(bundle_dir), "--batch-size", "2"]
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("Tom chases Jerry.\nMary likes John.\n")
        proc.stdin.flush()
        first = [proc.stdout.readline(), proc.stdout.readline()]  # blocks until written; stdin still open
        assert all(line.strip() for line in first)
        proc.stdin.write("Bob helps Alice.\n")
        proc.stdin.close()
        assert proc.stdout.readline().strip()
        assert proc.wait(timeout=120) == 0
