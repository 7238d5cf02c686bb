"""One API: /v1/attention shows /v1/translate's translation on its scale, takes `q`, and names mistakes;
languages are detected on request and a text in the wrong one gets a warning."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.api.schemas import IntrospectResponse, TranslateResponse

SVG = "{http://www.w3.org/2000/svg}"
EN_ZH = {"source": "en", "target": "zh"}


@pytest.mark.parametrize("beam", [None, 1, 4])
def test_attention_shows_what_translate_gives(client: TestClient, beam: int | None) -> None:
    text = "Mary likes John today. Tom chases Jerry."
    extra = {} if beam is None else {"beam_size": beam}
    translated = client.post("/v1/translate", json={**EN_ZH, "q": text, **extra}).json()["translations"][0]
    shown = client.post("/v1/attention", json={**EN_ZH, "q": text, **extra})
    assert shown.status_code == 200, shown.text
    body = shown.json()
    IntrospectResponse.model_validate(body)
    assert body["text"] == translated["text"] and body["score"] == pytest.approx(translated["score"], abs=1e-5)
    assert [t["logprob"] for t in body["target_tokens"]] == pytest.approx(
        [t["logprob"] for t in translated["target_tokens"]], abs=1e-5
    )
    assert body["segments"] == translated["segments"]
    view = translated["attention_view"]
    cross = np.array(body["cross_attention"])  # (L, N, T, S), block-diagonal over the two sentences
    at_view = cross[view["layer"]].mean(axis=0) if view["heads"] == "mean" else cross[view["layer"], view["heads"]]
    np.testing.assert_allclose(at_view, translated["attention"], atol=1e-5)
    assert np.array(body["decoder_self_attention"]).shape[2:] == (cross.shape[2], cross.shape[2])


def test_text_is_an_alias_of_q_and_missing_fields_name_the_mistake(client: TestClient) -> None:
    old = client.post("/v1/attention", json={**EN_ZH, "text": "Tom chases Jerry."})
    assert old.status_code == 200
    assert old.json()["text"] == client.post("/v1/attention", json={**EN_ZH, "q": "Tom chases Jerry."}).json()["text"]
    wrong = client.post("/v1/translate", json={**EN_ZH, "text": "Tom chases Jerry."})
    assert wrong.status_code == 422
    error = wrong.json()["error"]
    assert error["message"] == "`q` is required (this endpoint has no field `text`)" and error["field"] == "q"


def test_forced_scores_are_on_the_search_scale(client: TestClient) -> None:
    translated = client.post("/v1/translate", json={**EN_ZH, "q": "Tom chases Jerry.", "beam_size": 1}).json()
    best = translated["translations"][0]
    forced = client.post(
        "/v1/attention", json={**EN_ZH, "q": "Tom chases Jerry.", "forced_target": best["text"], "beam_size": 1}
    ).json()
    assert forced["forced"] and forced["score"] == pytest.approx(best["score"], abs=1e-4)


def test_auto_detects_the_source_and_a_wrong_source_warns(client: TestClient) -> None:
    auto = client.post("/v1/translate", json={"q": "Tom chases Jerry.", "source": "auto", "target": "zh"})
    assert auto.status_code == 200
    t = auto.json()["translations"][0]
    TranslateResponse.model_validate(auto.json())
    assert t["detected_language"]["language"] == "en" and t["warnings"] == []
    wrong = client.post("/v1/translate", json={**EN_ZH, "q": "你好，世界。"})
    assert wrong.status_code == 200  # a warning, not an error
    [warning] = wrong.json()["translations"][0]["warnings"]
    assert warning["code"] == "language_mismatch" and warning["message"].startswith("q is mostly cjk")
    batch = client.post("/v1/translate", json={**EN_ZH, "q": ["Tom chases Jerry.", "你好，世界。"]}).json()
    assert [[w["message"][:5] for w in t["warnings"]] for t in batch["translations"]] == [[], ["q[1] "]]
    missing = client.post("/v1/translate", json={"q": "hi", "source": "auto"})
    assert missing.status_code == 422 and missing.json()["error"]["field"] == "target"


def test_svg_default_view_legend_and_room(client: TestClient) -> None:
    body = {**EN_ZH, "q": "Tom chases Jerry."}
    default = client.get("/v1/models/en-zh").json()["attention_view"]
    svg = client.post("/v1/attention/svg", json=body)
    root = ET.fromstring(svg.text)
    title = root.find(f"{SVG}title").text
    heads = "mean of heads" if default["heads"] == "mean" else f"head {default['heads']}"
    assert f"layer {default['layer'] % 2}, {heads}" in title  # the bundle's default view (2 layers)
    assert root.find(f"{SVG}g[@class='legend']") is not None
    width = float(root.get("width"))
    assert width >= 0.6 * 13 * len(title)  # the title fits
    cells = root.findall(f"{SVG}rect[@class='cell']")
    right = max(float(c.get("x")) + float(c.get("width")) for c in cells)
    assert right < width  # so does the last column
