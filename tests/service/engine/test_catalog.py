from __future__ import annotations

import shutil
from pathlib import Path

import onnxruntime as ort
import pytest

from service.engine.bundle import BundleInvalid
from service.engine.catalog import Catalog, resolve_provider
from service.engine.errors import ProviderUnavailable, UnknownModel, UnsupportedPair
from service.engine.onnx_model import SessionConfig


def test_loads_every_bundle_with_a_default_per_pair(bundle_dir: Path) -> None:
    catalog = Catalog.load(bundle_dir, SessionConfig())
    assert sorted(catalog.models) == ["en-zh", "en-zh-int8"]
    assert catalog.defaults == {("en", "zh"): "en-zh"}
    assert catalog.for_pair("en", "zh").manifest.name == "en-zh"
    with pytest.raises(UnsupportedPair, match="supported pairs: en-zh"):
        catalog.for_pair("zh", "en")
    with pytest.raises(UnknownModel, match="loaded: en-zh, en-zh-int8"):
        catalog.get("fr-en")


@pytest.mark.skipif("CUDAExecutionProvider" in ort.get_available_providers(), reason="a GPU is here")
def test_cuda_asked_for_without_a_gpu_fails_loudly(bundle_dir: Path) -> None:
    with pytest.raises(ProviderUnavailable, match="CUDA was asked for but the session runs on CPUExecutionProvider"):
        Catalog.load(bundle_dir, SessionConfig(provider="cuda"))
    assert resolve_provider("auto") == "cpu"


def test_one_bad_bundle_stops_the_load(bundle_dir: Path, tmp_path: Path) -> None:
    shutil.copytree(bundle_dir, tmp_path / "b")
    (tmp_path / "b" / "en-zh-int8" / "decoder.onnx").write_bytes(b"junk")
    with pytest.raises(BundleInvalid, match=r"decoder\.onnx: size 4 bytes"):
        Catalog.load(tmp_path / "b", SessionConfig())
    with pytest.raises(BundleInvalid, match="no bundles"):
        Catalog.load(tmp_path, SessionConfig())


def test_idle_onnxruntime_threads_spin_only_when_asked() -> None:
    from service.api.app import session_config
    from service.engine.onnx_model import make_session
    from service.settings import DEFAULT_BUNDLES, Settings

    encoder = str(DEFAULT_BUNDLES / "en-zh" / "encoder.onnx")
    key = "session.intra_op.allow_spinning"
    quiet = make_session(encoder, session_config(Settings())).get_session_options()
    assert quiet.get_session_config_entry(key) == "0"  # the service's default
    spinning = make_session(encoder, session_config(Settings(intra_op_spinning=True))).get_session_options()
    with pytest.raises(RuntimeError, match="does not have"):  # unset: onnxruntime's own default, spinning
        spinning.get_session_config_entry(key)


def test_sessions_share_one_cpu_arena_unless_the_arena_is_off() -> None:
    from service.api.app import session_config
    from service.engine.onnx_model import make_session, shared_cpu_arena
    from service.settings import DEFAULT_BUNDLES, Settings

    encoder = str(DEFAULT_BUNDLES / "en-zh" / "encoder.onnx")
    key = "session.use_env_allocators"
    shared = make_session(encoder, session_config(Settings())).get_session_options()
    assert shared.get_session_config_entry(key) == "1"
    assert shared_cpu_arena.cache_info().currsize == 1  # registered once for the process
    own = make_session(encoder, session_config(Settings(enable_mem_arena=False))).get_session_options()
    assert not own.enable_cpu_mem_arena
    with pytest.raises(RuntimeError, match="does not have"):
        own.get_session_config_entry(key)


def test_memory_pattern_is_off_for_a_large_vocabulary_unless_set() -> None:
    from service.api.app import session_config
    from service.engine.bundle import load_bundle
    from service.engine.onnx_model import OnnxSeq2Seq, output_vocabulary, with_mem_pattern
    from service.settings import DEFAULT_BUNDLES, Settings

    bundle = load_bundle(DEFAULT_BUNDLES / "en-zh")
    decoder = bundle.manifest.graphs.decoder
    assert output_vocabulary(decoder) == 8000
    opus = [t.model_copy(update={"shape": ["batch", 65_001]}) if t.name == "log_probs" else t for t in decoder.outputs]
    assert output_vocabulary(decoder.model_copy(update={"outputs": opus})) == 65_001
    assert session_config(Settings()).enable_mem_pattern is None  # unset: the model decides
    assert with_mem_pattern(SessionConfig(), 8000).enable_mem_pattern is True
    assert with_mem_pattern(SessionConfig(), 65_001).enable_mem_pattern is False
    assert with_mem_pattern(SessionConfig(enable_mem_pattern=True), 65_001).enable_mem_pattern is True
    assert with_mem_pattern(SessionConfig(enable_mem_pattern=False), 8000).enable_mem_pattern is False
    shipped = OnnxSeq2Seq(bundle, SessionConfig())
    assert shipped.decoder.get_session_options().enable_mem_pattern
    off = OnnxSeq2Seq(bundle, session_config(Settings(enable_mem_pattern=False)))
    assert not off.decoder.get_session_options().enable_mem_pattern
    assert not off.encoder.get_session_options().enable_mem_pattern
