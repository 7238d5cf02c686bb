"""/v1/attention, /v1/models, health and metrics."""

from __future__ import annotations

import numpy as np
from fastapi.testclient import TestClient

from service.api.schemas import IntrospectResponse


def test_introspection_of_a_decoded_translation(client: TestClient) -> None:
    response = client.post("/v1/attention", json={"text": "Tom chases Jerry.", "source": "en", "target": "zh"})
    assert response.status_code == 200, response.text
    body = IntrospectResponse.model_validate(response.json())
    assert not body.forced
    T, S = len(body.target_tokens), len(body.source_tokens)
    cross = np.array(body.cross_attention)
    assert cross.shape == (1, 2, T, S)  # tiny model: 1 layer, 2 heads
    np.testing.assert_allclose(cross.sum(-1), 1.0, atol=1e-4)
    assert np.array(body.encoder_self_attention).shape == (1, 2, S, S)
    dec = np.array(body.decoder_self_attention)
    assert dec.shape == (1, 2, T, T) and np.all(np.triu(dec[0, 0], 1) == 0)
    # the decoded target is what /v1/translate gives greedily
    greedy = client.post(
        "/v1/translate", json={"q": "Tom chases Jerry.", "source": "en", "target": "zh", "beam_size": 1}
    )
    assert greedy.json()["translations"][0]["text"] == body.text


def test_forced_decoding_scores_a_users_translation(client: TestClient) -> None:
    good = client.post(
        "/v1/attention", json={"text": "Tom chases Jerry.", "forced_target": "汤姆追杰瑞。", "model": "en-zh"}
    )
    bad = client.post(
        "/v1/attention", json={"text": "Tom chases Jerry.", "forced_target": "玛丽喜欢鲍勃。", "model": "en-zh"}
    )
    assert good.status_code == bad.status_code == 200
    g, b = good.json(), bad.json()
    assert g["forced"] and g["text"] == "汤姆追杰瑞。"
    assert all("logprob" in t for t in g["target_tokens"])
    assert g["score"] > b["score"]  # the trained tiny model prefers the right translation


def test_introspection_filters_and_bounds(client: TestClient) -> None:
    body = {"text": "Tom chases Jerry.", "model": "en-zh", "layers": [0], "heads": [1], "self_attention": False}
    result = client.post("/v1/attention", json=body).json()
    assert result["layers"] == [0] and result["heads"] == [1]
    assert np.array(result["cross_attention"]).shape[:2] == (1, 1)
    assert result["encoder_self_attention"] is None
    bad = client.post("/v1/attention", json={**body, "heads": [5]})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "heads"
    long = client.post("/v1/attention", json={**body, "forced_target": "汤" * 300})
    assert long.status_code == 422 and long.json()["error"]["field"] == "forced_target"


def test_models(client: TestClient) -> None:
    result = client.get("/v1/models").json()
    assert result["defaults"] == {"en-zh": "en-zh"}
    names = {m["name"] for m in result["models"]}
    assert names == {"en-zh", "en-zh-int8"}
    one = client.get("/v1/models/en-zh-int8").json()
    assert one["quantization"]["mode"] == "int8" and one["provider"] == "cpu"
    assert one["family"] == "transformer" and one["heads"] == 2 and one["parity"]["passed"]
    assert one["limits"] == {"max_source_tokens": 64, "max_target_tokens": 64}
    assert client.get("/v1/models/en-zh").json()["default_for"] == ["en-zh"]
    missing = client.get("/v1/models/nope")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_model"


def test_health(client: TestClient) -> None:
    assert client.get("/livez").json() == {"status": "alive"}
    assert client.get("/readyz").json() == {"status": "ready"}


def test_metrics(client: TestClient) -> None:
    client.post("/v1/translate", json={"q": "Tom chases Jerry.", "source": "en", "target": "zh"})
    text = client.get("/metrics").text
    for name in (
        "translator_requests_total",
        "translator_inference_duration_seconds_bucket",
        "translator_batch_size_bucket",
        "translator_queue_depth",
        "translator_tokens_total",
        'translator_model_info{attention="multihead_scaled_dot",family="transformer",name="en-zh"',
    ):
        assert name in text, name
    assert 'translator_requests_total{route="/v1/translate",status="200"}' in text


def test_openapi_has_examples(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    body = spec["components"]["schemas"]["TranslateBody"]
    assert body["examples"][0]["q"] == "Tom chases Jerry."
    assert spec["paths"]["/v1/translate"]["post"]["summary"]
