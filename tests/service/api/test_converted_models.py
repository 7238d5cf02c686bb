"""Converted Marian bundles served over real HTTP translate and attend exactly as transformers does."""

from __future__ import annotations

import json
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.support.server import RunningServer

transformers = pytest.importorskip("transformers")

SOURCES = [
    "Tom chases Jerry.",
    "Mary helps Bob today.",
    "Alice sees John again.",
    "Bob calls Mary.",
    "Jerry likes Alice today.",
    "John sees Tom.",
]
MODELS = {"en-de": ("en-de", ">>deu<< "), "marian-en-zh": ("en-zh", "")}  # bundle -> (checkpoint, prefix)


@pytest.fixture(scope="module")
def server(converted_bundles: Path) -> Iterator[RunningServer]:
    running = RunningServer(converted_bundles)
    yield running
    running.stop()


def post(server: RunningServer, path: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        server.url + path, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as r:
        return json.loads(r.read())


def get(server: RunningServer, path: str) -> Any:
    with urllib.request.urlopen(server.url + path, timeout=30) as r:
        return json.loads(r.read())


class Reference:
    """transformers' own model and tokenizer of a checkpoint."""

    def __init__(self, directory: Path, prefix: str) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.tokenizer = transformers.MarianTokenizer.from_pretrained(directory)
        self.model = transformers.MarianMTModel.from_pretrained(directory, attn_implementation="eager").eval()
        self.prefix = prefix

    @torch.inference_mode()
    def translate(self, text: str, beam: int) -> tuple[str, np.ndarray]:
        """generate()'s text, and the cross-attention (L, N, T, S) of that output, teacher-forced."""
        inputs = self.tokenizer(self.prefix + text, return_tensors="pt")
        generated = self.model.generate(**inputs, num_beams=beam)
        out = self.model(**inputs, decoder_input_ids=generated[:, :-1], output_attentions=True)
        cross = torch.stack(out.cross_attentions, dim=1)[0].numpy()  # (L, N, T, S)
        return self.tokenizer.decode(generated[0], skip_special_tokens=True), cross


@pytest.fixture(scope="module")
def references(marian_checkpoints: dict[str, Path]) -> dict[str, Reference]:
    return {name: Reference(marian_checkpoints[ckpt], prefix) for name, (ckpt, prefix) in MODELS.items()}


def test_the_models_list_the_converted_pairs(server: RunningServer) -> None:
    listed = {m["name"]: m for m in get(server, "/v1/models")["models"]}
    assert (listed["en-de"]["source"], listed["en-de"]["target"]) == ("en", "de")
    assert listed["en-de"]["tokenizer"] == {"kind": "sentencepiece+vocab", "target_token": ">>deu<<"}
    assert listed["marian-en-zh"]["origin"] == "huggingface-marian"
    assert listed["marian-en-zh"]["search"]["stopping"] == "transformers"
    assert get(server, "/v1/models")["defaults"] == {"en-de": "en-de", "en-zh": "marian-en-zh"}


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_translations_and_attention_equal_transformers(
    server: RunningServer, references: dict[str, Reference], model: str, beam: int
) -> None:
    view = get(server, f"/v1/models/{model}")["attention_view"]
    reference = references[model]
    for text in SOURCES:
        [got] = post(server, "/v1/translate", {"q": text, "model": model, "beam_size": beam})["translations"]
        expected_text, cross = reference.translate(text, beam)
        assert got["text"] == expected_text, text
        heads = cross[view["layer"]]  # (N, T, S)
        # the bundle's default view: the head mean, or the one head that name alignment chose
        expected = heads.mean(axis=0) if view["heads"] == "mean" else heads[view["heads"]]  # (T, S)
        np.testing.assert_allclose(np.array(got["attention"]), expected, atol=1e-4)
        assert len(got["source_tokens"]) == expected.shape[1] and len(got["target_tokens"]) == expected.shape[0]


def test_the_target_token_is_a_special_source_column(server: RunningServer) -> None:
    [got] = post(server, "/v1/translate", {"q": "Tom chases Jerry.", "source": "en", "target": "de"})["translations"]
    first = got["source_tokens"][0]
    assert first == {"text": ">>deu<<", "start": 0, "end": 0, "special": True}
    assert got["source_tokens"][1]["text"] == "Tom"  # offsets still index the text the user sent
    np.testing.assert_allclose(np.array(got["attention"]).sum(axis=1), 1.0, atol=1e-5)  # its column is kept
    [words] = post(
        server, "/v1/translate", {"q": "Tom chases Jerry.", "model": "en-de", "attention": {"granularity": "word"}}
    )["translations"]
    assert [t["text"] for t in words["source_tokens"]] == [">>deu<<", "Tom", "chases", "Jerry", ".", "</s>"]
    np.testing.assert_allclose(np.array(words["attention"]).sum(axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_introspection_matches_every_layer_and_head(
    server: RunningServer, references: dict[str, Reference], model: str
) -> None:
    got = post(server, "/v1/attention", {"text": "Mary helps Bob today.", "model": model})
    expected_text, cross = references[model].translate("Mary helps Bob today.", beam=1)
    assert got["text"] == expected_text
    np.testing.assert_allclose(np.array(got["cross_attention"]), cross, atol=1e-4)  # (L, N, T, S)
