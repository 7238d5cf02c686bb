"""Every bundle under the bundle directory, loaded and verified once, with a default per pair."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnxruntime as ort

from service.engine.bundle import BundleInvalid, load_bundle
from service.engine.errors import ProviderUnavailable, UnknownModel, UnsupportedPair
from service.engine.manifest import MANIFEST_FILE
from service.engine.onnx_model import PROVIDERS, SessionConfig
from service.engine.translator import Translator


def resolve_provider(provider: str) -> str:
    """`auto` is CUDA when onnxruntime-gpu sees a GPU, else CPU."""
    if provider == "auto":
        return "cuda" if PROVIDERS["cuda"] in ort.get_available_providers() else "cpu"
    return provider


@dataclass
class Catalog:
    models: dict[str, Translator]
    defaults: dict[tuple[str, str], str]  # (source, target) -> model name
    provider: str

    @classmethod
    def load(cls, directory: Path, config: SessionConfig) -> Catalog:
        """Load every bundle under `directory`; a bad one stops startup with its problems."""
        if not directory.is_dir():
            raise BundleInvalid(directory, ["bundle directory does not exist"])
        paths = sorted(p.parent for p in directory.glob(f"*/{MANIFEST_FILE}"))
        if not paths:
            raise BundleInvalid(directory, [f"no bundles (no */{MANIFEST_FILE}) found"])
        models = {}
        for path in paths:
            translator = Translator(load_bundle(path), config)
            check_provider(translator, config.provider)
            if translator.manifest.name in models:
                raise BundleInvalid(path, [f"a second bundle is named {translator.manifest.name!r}"])
            models[translator.manifest.name] = translator
        return cls(models=models, defaults=choose_defaults(models), provider=config.provider)

    def get(self, name: str) -> Translator:
        if name not in self.models:
            raise UnknownModel(f"no model named {name!r}; loaded: {', '.join(sorted(self.models))}", field="model")
        return self.models[name]

    def for_pair(self, source: str, target: str) -> Translator:
        name = self.defaults.get((source, target))
        if name is None:
            pairs = ", ".join(f"{s}-{t}" for s, t in sorted(self.defaults))
            raise UnsupportedPair(f"no model translates {source}-{target}; supported pairs: {pairs}", field="source")
        return self.models[name]

    def pairs(self) -> list[str]:
        return [f"{s}-{t}" for s, t in sorted(self.defaults)]


def choose_defaults(models: dict[str, Translator]) -> dict[tuple[str, str], str]:
    """The bundle named `<source>-<target>` is its pair's default; else the first by name."""
    defaults: dict[tuple[str, str], str] = {}
    for name in sorted(models):
        m = models[name].manifest
        pair = (m.source_lang, m.target_lang)
        if pair not in defaults or name == f"{m.source_lang}-{m.target_lang}":
            defaults[pair] = name
    return defaults


def check_provider(translator: Translator, provider: str) -> None:
    """onnxruntime falls back to CPU silently; when CUDA is asked for, insist on it."""
    if provider != "cuda":
        return
    for session in (translator.model.encoder, translator.model.decoder):
        if session.get_providers()[0] != PROVIDERS["cuda"]:
            raise ProviderUnavailable(
                f"{translator.manifest.name}: CUDA was asked for but the session runs on "
                f"{session.get_providers()[0]} (is onnxruntime-gpu installed and a GPU visible?)"
            )
