"""The startup check of batch invariance on this CPU (service/engine/invariance.py): real sessions,
real batches through the service's own path. A source chunk of 1 (sources no longer padded to the
one-row kernels' unroll) is what a CPU whose kernels add padding differently looks like to the
service: the check must say so in /v1/models, /metrics and the log."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.engine import onnx_model
from service.engine.invariance import probe_texts
from service.settings import DEFAULT_BUNDLES, Settings
from tests.service.api.conftest import wait_ready


def checked(client: TestClient) -> tuple[dict[str, bool | None], dict[str, float]]:
    """Each model's `batch_invariant_here`, and its `translator_batch_invariant` sample."""
    models = {m["name"]: m["batch_invariant_here"] for m in client.get("/v1/models").json()["models"]}
    samples = re.findall(r'^translator_batch_invariant\{name="([^"]+)"\} (\S+)$', client.get("/metrics").text, re.M)
    return models, {name: float(value) for name, value in samples}


def test_every_model_is_found_batch_invariant_here(client: TestClient) -> None:
    models, samples = checked(client)
    assert models and all(found is True for found in models.values())
    assert samples == dict.fromkeys(models, 1.0)


@pytest.mark.skipif(not (DEFAULT_BUNDLES / "en-zh" / "manifest.json").is_file(), reason="no shipped en-zh")
@pytest.mark.parametrize("fused", [False, True])
def test_a_cpu_that_changes_batched_translations_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, fused: bool
) -> None:
    """The shipped en-zh with its sources no longer padded (the tiny test models' probes happen to add
    up the same unpadded): with the decoder's attentions as written, onnxruntime's one-row MatMul adds
    the padding in and batching changes translations; fused, the attentions never read the padding."""
    (tmp_path / "en-zh").symlink_to(DEFAULT_BUNDLES / "en-zh")
    monkeypatch.setattr(onnx_model, "SOURCE_CHUNK", 1)
    with (
        caplog.at_level(logging.WARNING, logger="attention_mt"),
        TestClient(create_app(Settings(bundles=tmp_path, fuse_attention=fused))) as c,
    ):
        wait_ready(c)
        models, samples = checked(c)
    assert models == {"en-zh": fused} and samples == {"en-zh": float(fused)}
    warned = any(r.getMessage().startswith("en-zh: NOT batch-invariant on this CPU") for r in caplog.records)
    assert warned is not fused


def test_the_check_can_be_turned_off(bundle_dir: Path) -> None:
    with TestClient(create_app(Settings(bundles=bundle_dir, check_batch_invariance=False))) as c:
        wait_ready(c)
        models, samples = checked(c)
    assert models and all(found is None for found in models.values())
    assert samples == {}


def test_probes_the_limits_refuse_leave_it_unchecked_and_say_so(
    bundle_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Three texts where a request may hold two: the service starts, says it could not check, and
    reports nothing rather than a verdict."""
    settings = Settings(bundles=bundle_dir, max_texts=2)
    with caplog.at_level(logging.WARNING, logger="attention_mt"), TestClient(create_app(settings)) as c:
        wait_ready(c)
        models, samples = checked(c)
    assert models and all(found is None for found in models.values())
    assert samples == {}
    assert all(any(r.getMessage().startswith(f"{name}: batch invariance not checked") for r in caplog.records)
               for name in models)  # fmt: skip


def test_the_probes_grow_and_stay_one_sentence_each() -> None:
    texts = probe_texts("Hello.")
    assert [len(t) for t in texts] == sorted(len(t) for t in texts) and len(set(texts)) == 3
    assert all("." not in t for t in texts[1:])
