"""The LibreTranslate-compatible surface, driven by the real `libretranslatepy` client over HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from libretranslatepy import LibreTranslateAPI

from tests.support.server import RunningServer

KEY = "lt-test-key-0123456789"


@pytest.fixture(scope="module")
def server(bundle_dir: Path) -> Iterator[RunningServer]:
    running = RunningServer(bundle_dir)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def keyed(bundle_dir: Path) -> Iterator[RunningServer]:
    running = RunningServer(bundle_dir, env={"MT_API_KEYS": json.dumps([KEY])})
    yield running
    running.stop()


def post(server: RunningServer, path: str, body: dict[str, object]) -> tuple[int, object]:
    request = urllib.request.Request(
        server.url + path, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_client_translates_detects_and_lists(server: RunningServer) -> None:
    lt = LibreTranslateAPI(server.url)
    expected = post(server, "/v1/translate", {"q": "Tom chases Jerry.", "source": "en", "target": "zh"})[1]
    assert lt.translate("Tom chases Jerry.", "en", "zh") == expected["translations"][0]["text"]  # type: ignore[index]
    assert lt.translate("Tom chases Jerry.", "auto", "zh") == expected["translations"][0]["text"]  # type: ignore[index]
    assert lt.detect("Tom chases Jerry.")[0]["language"] == "en"
    assert lt.detect("汤姆追杰瑞。")[0]["language"] == "zh"
    languages = {x["code"]: x for x in lt.languages()}
    assert languages["en"]["targets"] == ["zh"] and languages["en"]["name"] == "English"


def test_json_lists_auto_detection_and_alternatives(server: RunningServer) -> None:
    status, body = post(
        server, "/translate", {"q": ["Tom chases Jerry.", "Mary likes Bob."], "source": "auto", "target": "zh"}
    )
    assert status == 200 and isinstance(body, dict)
    assert len(body["translatedText"]) == 2
    assert [d["language"] for d in body["detectedLanguage"]] == ["en", "en"]
    assert all(0 < d["confidence"] <= 100 for d in body["detectedLanguage"])
    status, body = post(
        server, "/translate", {"q": "Tom chases Jerry.", "source": "en", "target": "zh", "alternatives": 2}
    )
    assert status == 200 and isinstance(body, dict) and len(body["alternatives"]) <= 2


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"q": "hi", "source": "en", "target": "zh", "format": "html"}, "format", "not supported"),
        ({"source": "en", "target": "zh"}, "q", "missing q"),
        ({"q": "hi", "source": "en", "target": "fr"}, "source", "supported pairs"),
        ({"q": "x" * 5000, "source": "en", "target": "zh"}, "q", "the limit is"),
        ({"q": "hi", "source": "en", "target": "zh", "alternatives": 9}, "alternatives", "0..3"),
    ],
)
def test_errors_keep_libretranslate_shape(
    server: RunningServer, body: dict[str, object], field: str, words: str
) -> None:
    status, answer = post(server, "/translate", body)
    assert status == 400 and isinstance(answer, dict)
    assert isinstance(answer["error"], str) and words in answer["error"] and answer["field"] == field


def test_keys_in_the_body_or_the_header(keyed: RunningServer) -> None:
    with pytest.raises(urllib.error.HTTPError) as refused:
        LibreTranslateAPI(keyed.url).translate("Tom chases Jerry.", "en", "zh")
    assert refused.value.code == 403 and "api_key" in json.loads(refused.value.read())["error"]
    assert LibreTranslateAPI(keyed.url, api_key=KEY).translate("Tom chases Jerry.", "en", "zh")
    assert LibreTranslateAPI(keyed.url, api_key=KEY).languages()
    header = urllib.request.Request(
        keyed.url + "/translate",
        data=json.dumps({"q": "Tom chases Jerry.", "source": "en", "target": "zh"}).encode(),
        headers={"content-type": "application/json", "x-api-key": KEY},
    )
    with urllib.request.urlopen(header, timeout=60) as r:
        assert r.status == 200
    status, _ = post(keyed, "/v1/translate", {"q": "hi", "source": "en", "target": "zh", "api_key": KEY})
    assert status == 401  # /v1 takes the header only
