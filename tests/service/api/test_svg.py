"""POST /v1/attention/svg: a self-contained SVG heatmap that parses, with one cell per weight."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
from fastapi.testclient import TestClient

from service.api.svg import FONT_STACK, heatmap_svg, viridis

SVG = "{http://www.w3.org/2000/svg}"


def test_svg_heatmap(client: TestClient) -> None:
    body = {"text": "Tom chases Jerry.", "model": "en-zh", "forced_target": "汤姆追杰瑞。"}
    response = client.post("/v1/attention/svg", json={**body, "layer": -1, "head": 1})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("image/svg+xml")
    root = ET.fromstring(response.text)
    cells = root.findall(f"{SVG}rect[@class='cell']")
    info = client.post("/v1/attention", json={**body, "self_attention": False}).json()
    T, S = len(info["target_tokens"]), len(info["source_tokens"])
    assert len(cells) == T * S
    labels = [t.text for t in root.findall(f"{SVG}text[@class='target']")]
    assert labels == [t["text"] for t in info["target_tokens"]]
    assert "WenQuanYi Micro Hei" in root.get("font-family", "") and "Noto Sans CJK SC" in root.get("font-family", "")
    # the drawn weights are head 1 of the last layer
    head = np.array(info["cross_attention"][-1][1])
    tips = [float(c.find(f"{SVG}title").text.rsplit(": ", 1)[1]) for c in cells]
    np.testing.assert_allclose(tips, head.ravel(), atol=1e-3)


def test_svg_mean_of_heads_and_word_granularity(client: TestClient) -> None:
    body = {"text": "Tom chases Jerry.", "model": "en-zh", "granularity": "word"}
    response = client.post("/v1/attention/svg", json=body)
    root = ET.fromstring(response.text)
    sources = [t.text for t in root.findall(f"{SVG}text[@class='source']")]
    assert sources == ["Tom", "chases", "Jerry", ".", "</s>"]
    assert "mean of heads" in root.find(f"{SVG}title").text


def test_svg_errors_use_the_error_body(client: TestClient) -> None:
    response = client.post("/v1/attention/svg", json={"text": "hi", "model": "en-zh", "head": 7})
    assert response.status_code == 422 and response.json()["error"]["field"] == "heads"


def test_labels_are_escaped() -> None:
    svg = heatmap_svg(["<a>", "&"], ['"q"'], [[0.25, 0.75]], "t < u")
    root = ET.fromstring(svg)
    assert [t.text for t in root.findall(f"{SVG}text[@class='source']")] == ["<a>", "&"]
    assert FONT_STACK in svg


def test_viridis_ends() -> None:
    assert viridis(0.0) == "#440154" and viridis(1.0) == "#fde725" and viridis(2.0) == "#fde725"
