"""Sessions on onnxruntime's one process-wide thread pool (onnx_model.shared_thread_pool). A process
has one such pool, so each case runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from service.engine.onnx_model import SessionConfig

RUN = """
import json, sys
from service.engine.bundle import load_bundle
from service.engine.onnx_model import OnnxSeq2Seq, SessionConfig
from service.engine.translator import Translator
bundle = load_bundle(sys.argv[1])
shared = sys.argv[2] == "shared"
config = SessionConfig(intra_op_threads=2, spinning=shared, shared_thread_pool=shared)
translator = Translator(bundle, config)
model = translator.model
found = translator.search_ids(translator.source_ids(["the cat sees the dog ."]), translator.options(beam_size=4))
refused = []
for other in (SessionConfig(intra_op_threads=3, shared_thread_pool=True), SessionConfig(intra_op_threads=2)):
    try:
        OnnxSeq2Seq(bundle, other)
    except ValueError as exc:
        refused.append(str(exc))
print(json.dumps({
    "own threads": [s.get_session_options().use_per_session_threads for s in (model.encoder, model.decoder)],
    "translations": [(h[0].tokens, h[0].token_log_probs, h[0].attention.tolist()) for h in found],
    "refused": refused,
}))
"""


def run(bundle: Path, mode: str) -> dict[str, object]:
    command = [sys.executable, "-c", RUN, str(bundle), mode]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return found


def test_sessions_on_one_shared_pool_translate_as_with_their_own(bundle_dir: Path) -> None:
    shared, own = run(bundle_dir / "en-zh-int8", "shared"), run(bundle_dir / "en-zh-int8", "own")
    assert shared["own threads"] == [False, False] and own["own threads"] == [True, True]
    assert shared["translations"] == own["translations"]
    # onnxruntime cannot resize the pool, and refuses sessions with threads of their own beside it
    assert shared["refused"] == [
        "this process's shared thread pool is (2, 0) (intra, inter), not (3, 0)",
        "this process shares one thread pool: its sessions cannot have threads of their own",
    ]


def test_the_shared_pool_spins() -> None:
    with pytest.raises(ValueError, match="always spins"):
        SessionConfig(spinning=False, shared_thread_pool=True)


def test_a_server_shares_the_pool_only_when_its_threads_spin() -> None:
    from service.api.app import session_config
    from service.settings import Settings

    assert not session_config(Settings()).shared_thread_pool  # one thread, not spinning: the default
    assert not session_config(Settings(intra_op_threads=2)).shared_thread_pool
    assert not session_config(Settings(intra_op_spinning=True)).shared_thread_pool  # one thread: no pool
    assert session_config(Settings(intra_op_threads=2, intra_op_spinning=True)).shared_thread_pool
