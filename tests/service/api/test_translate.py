"""POST /v1/translate against tiny bundles built in the test session."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.api.schemas import TranslateResponse

EN_ZH = {"source": "en", "target": "zh"}


def translate(client: TestClient, **body: object) -> dict:
    response = client.post("/v1/translate", json={**EN_ZH, **body})
    assert response.status_code == 200, response.text
    TranslateResponse.model_validate(response.json())  # the documented schema holds
    return response.json()


def test_single_text(client: TestClient) -> None:
    result = translate(client, q="Tom chases Jerry.")
    assert result["model"] == "en-zh"
    [t] = result["translations"]
    assert t["text"] and t["alternatives"] == []
    rows = np.array(t["attention"])
    assert rows.shape == (len(t["target_tokens"]), len(t["source_tokens"]))
    np.testing.assert_allclose(rows.sum(axis=1), 1.0, atol=1e-4)
    assert t["source_tokens"][-1] == {"text": "</s>", "start": 17, "end": 17, "special": True}
    for tok in t["source_tokens"][:-1]:
        assert "Tom chases Jerry."[tok["start"] : tok["end"]] == tok["text"]
    for tok in t["target_tokens"]:
        assert tok.get("special") or t["text"][tok["start"] : tok["end"]] == tok["text"].strip()
        assert tok["logprob"] <= 0
    assert t["score"] <= 0
    signals = t["signals"]
    assert signals["heuristic"] is True
    assert len(signals["coverage"]) == len(t["source_tokens"]) and len(signals["entropy"]) == len(t["target_tokens"])
    assert 0.0 <= signals["eos_mass"] <= 1.0


def test_a_list_is_the_same_code_path_in_order(client: TestClient) -> None:
    texts = ["Tom chases Jerry.", "Mary likes John today.", "Bob helps Alice again."]
    batch = translate(client, q=texts, beam_size=1)["translations"]
    singles = [translate(client, q=t, beam_size=1)["translations"][0] for t in texts]
    assert [b["text"] for b in batch] == [s["text"] for s in singles]
    for b, s in zip(batch, singles, strict=True):
        np.testing.assert_allclose(b["attention"], s["attention"], atol=1e-4)


def test_n_best_alternatives(client: TestClient) -> None:
    [t] = translate(client, q="Tom chases Jerry.", beam_size=4, n_best=3)["translations"]
    hyps = [t, *t["alternatives"]]
    assert 1 < len(hyps) <= 3
    assert [h["score"] for h in hyps] == sorted((h["score"] for h in hyps), reverse=True)


def test_beam_one_equals_greedy_default_view(client: TestClient) -> None:
    [a] = translate(client, q="Mary sees Tom.", beam_size=1)["translations"]
    [b] = translate(client, q="Mary sees Tom.", beam_size=1, attention={"layer": 0, "heads": "mean"})["translations"]
    assert a["text"] == b["text"]


def test_word_granularity(client: TestClient) -> None:
    [t] = translate(client, q="Tom chases Jerry.", attention={"granularity": "word"})["translations"]
    words = [tok["text"] for tok in t["source_tokens"]]
    assert words == ["Tom", "chases", "Jerry", ".", "</s>"]
    rows = np.array(t["attention"])
    assert rows.shape == (len(t["target_tokens"]), 5)
    np.testing.assert_allclose(rows.sum(axis=1), 1.0, atol=1e-4)
    assert "renormalised" in t["attention_view"]["rule"]


def test_topk_and_none_formats(client: TestClient) -> None:
    [t] = translate(client, q="Tom chases Jerry.", attention={"format": "topk", "top_k": 2})["translations"]
    assert all(len(row) == 2 and row[0]["weight"] >= row[1]["weight"] for row in t["attention"])
    [n] = translate(client, q="Tom chases Jerry.", attention={"format": "none"})["translations"]
    assert n["attention"] is None and n["signals"]["coverage"]


def test_one_head_of_one_layer(client: TestClient) -> None:
    [t] = translate(client, q="Tom chases Jerry.", attention={"layer": -1, "heads": 1})["translations"]
    assert t["attention_view"]["heads"] == 1
    np.testing.assert_allclose(np.array(t["attention"]).sum(axis=1), 1.0, atol=1e-4)


def test_choose_a_model_by_name(client: TestClient) -> None:
    response = client.post("/v1/translate", json={"q": "Tom chases Jerry.", "model": "en-zh-int8"})
    assert response.status_code == 200 and response.json()["model"] == "en-zh-int8"


def test_max_output_tokens_caps_the_output(client: TestClient) -> None:
    [t] = translate(client, q="Tom chases Jerry today.", max_output_tokens=2)["translations"]
    assert len(t["target_tokens"]) <= 2


@pytest.mark.parametrize(
    ("body", "status", "code", "field"),
    [
        ({"q": "x" * 201}, 422, "input_too_long", "q"),
        ({"q": ["ok", "x" * 201]}, 422, "input_too_long", "q[1]"),
        ({"q": ["a"] * 9}, 422, "input_too_long", "q"),
        ({"q": []}, 422, "input_too_long", "q"),
        ({"q": "bad \u0000 text"}, 422, "invalid_text", "q"),
        ({"q": ["fine", "lone \ud800"]}, 422, "invalid_text", "q[1]"),
        ({"q": "   "}, 422, "invalid_text", "q"),
        ({"q": "hi", "beam_size": "3"}, 422, "invalid_request", "beam_size"),
        ({"q": "hi", "beam_size": 0}, 422, "invalid_request", "beam_size"),
        ({"q": "hi", "beam_size": 99}, 422, "invalid_request", "beam_size"),
        ({"q": "hi", "beam_size": 2, "n_best": 3}, 422, "invalid_request", "n_best"),
        ({"q": "hi", "max_output_tokens": -1}, 422, "invalid_request", "max_output_tokens"),
        ({"q": "hi", "max_output_tokens": 10_000}, 422, "invalid_request", "max_output_tokens"),
        ({"q": "hi", "colour": "blue"}, 422, "invalid_request", "colour"),
        ({"q": 5}, 422, "invalid_request", "q"),
        ({"q": None}, 422, "invalid_request", "q"),
        ({"q": "hi", "attention": {"layer": 7}}, 422, "invalid_request", "attention.layer"),
        ({"q": "hi", "attention": {"heads": 9}}, 422, "invalid_request", "attention.heads"),
        ({"q": "hi", "attention": {"granularity": "char"}}, 422, "invalid_request", "attention.granularity"),
        ({"q": "hi", "model": "nope"}, 422, "unknown_model", "model"),
    ],
)
def test_errors_name_the_field(client: TestClient, body: dict, status: int, code: str, field: str) -> None:
    payload = {**EN_ZH, **body} if "model" not in body else body
    # json.dumps escapes a lone surrogate as \ud800, as a client sending one would
    response = client.post("/v1/translate", content=json.dumps(payload), headers={"content-type": "application/json"})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["field"] == field, error
    assert not field.startswith("q") or error["message"].startswith(field), error  # the body's name, not the engine's


def test_a_paragraph_is_translated_sentence_by_sentence(client: TestClient) -> None:
    text = "Tom chases Jerry.  Mary likes John today.\n\nBob helps Alice."
    [t] = translate(client, q=text, beam_size=1)["translations"]
    alone = [
        translate(client, q=s, beam_size=1)["translations"][0]
        for s in ("Tom chases Jerry.", "Mary likes John today.", "Bob helps Alice.")
    ]
    segments = t["segments"]
    assert [s["join"] for s in segments] == ["start", "sentence", "line"]
    assert [text[s["source"]["start"] : s["source"]["end"]] for s in segments] == [
        "Tom chases Jerry.", "Mary likes John today.", "Bob helps Alice."
    ]  # fmt: skip
    # each piece is what the sentence gives alone, joined back with the text's own line break
    assert [t["text"][s["target"]["start"] : s["target"]["end"]] for s in segments] == [a["text"] for a in alone]
    assert t["text"] == alone[0]["text"] + alone[1]["text"] + "\n\n" + alone[2]["text"]  # Chinese: no spaces
    # one matrix over the whole text: zero outside each piece's block, every row sums to 1
    m = np.array(t["attention"])
    assert m.shape == (len(t["target_tokens"]), len(t["source_tokens"]))
    np.testing.assert_allclose(m.sum(axis=1), 1.0, atol=1e-4)
    for s, a in zip(segments, alone, strict=True):
        rows = slice(s["target_tokens"]["start"], s["target_tokens"]["end"])
        cols = slice(s["source_tokens"]["start"], s["source_tokens"]["end"])
        np.testing.assert_allclose(m[rows, cols], a["attention"], atol=1e-4)
        assert m[rows].sum() == pytest.approx(m[rows, cols].sum(), abs=1e-4)
    for tok in t["source_tokens"]:  # offsets index the whole text (a lone "▁" piece has an empty span)
        assert tok.get("special") or tok["start"] == tok["end"] or text[tok["start"] : tok["end"]] == tok["text"]
    for tok in t["target_tokens"]:
        assert tok.get("special") or t["text"][tok["start"] : tok["end"]] == tok["text"].strip()
    assert t["alternatives"] == [] and t["score"] == pytest.approx(sum(a["score"] for a in alone), abs=1e-4)


def test_a_sentence_over_the_token_limit_is_cut_at_clauses(client: TestClient) -> None:
    long = ", ".join(["Tom chases Jerry"] * 11) + "."  # one sentence, over the 64-token limit, under 200 chars
    [t] = translate(client, q=long, beam_size=1)["translations"]
    joins = [s["join"] for s in t["segments"]]
    assert joins[0] == "start" and set(joins[1:]) == {"clause"} and len(joins) >= 2
    for s in t["segments"]:
        assert s["source_tokens"]["end"] - s["source_tokens"]["start"] <= 64
        assert long[s["source"]["start"] : s["source"]["end"]].strip()
    words = " ".join(["J"] * 99)  # no clause to cut at: cut at the limit, between tokens
    [w] = translate(client, q=words, beam_size=1, attention={"format": "none"})["translations"]
    assert {s["join"] for s in w["segments"][1:]} == {"limit"}


def test_unknown_pair_lists_the_supported_ones(client: TestClient) -> None:
    response = client.post("/v1/translate", json={"q": "hi", "source": "zh", "target": "fr"})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "unsupported_language_pair" and "supported pairs: en-zh" in error["message"]


def test_body_shape_errors(client: TestClient) -> None:
    assert (
        client.post("/v1/translate", content=b"{not json", headers={"content-type": "application/json"}).status_code
        == 400
    )
    too_big = client.post("/v1/translate", json={**EN_ZH, "q": "x" * 5000})
    assert too_big.status_code == 413 and too_big.json()["error"]["limit"] == 4096
    assert client.post("/v1/translate", json=["q"]).status_code == 422
    assert client.get("/v1/translate").status_code == 405
    assert client.get("/v1/translate").json()["error"]["code"] == "method_not_allowed"
    missing = client.get("/nope")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_rerank_without_the_opposite_direction_names_the_field(client: TestClient) -> None:
    response = client.post("/v1/translate", json={**EN_ZH, "q": "Tom likes tea.", "rerank": True})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["field"] == "rerank" and "opposite direction (zh-en)" in error["message"]
    attention = client.post("/v1/attention", json={**EN_ZH, "q": "Tom likes tea.", "rerank": True})
    assert attention.status_code == 422 and attention.json()["error"]["field"] == "rerank"
