"""The web page in a real headless Chromium (Debian's), against a real `attention-mt serve`."""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT
from tests.support.server import RunningServer

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None and os.environ.get("CI"):
    raise RuntimeError("CI must install Debian's chromium and a CJK font (see .ci/run)")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
SCREENSHOTS = PROJECT_ROOT / "build" / "screenshots"
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def server(bundle_dir: Path) -> Iterator[RunningServer]:
    running = RunningServer(bundle_dir, env={"MT_MAX_CHARS": "200"})
    yield running
    running.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


def api(server: RunningServer, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        server.url + path, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        return json.loads(r.read())


def test_translate_and_look_at_the_attention(server: RunningServer, browser: object) -> None:
    page = browser.new_page(viewport={"width": 1100, "height": 900})  # type: ignore[attr-defined]
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.goto(server.url + "/")
    page.wait_for_function("document.querySelectorAll('#pair option').length > 0")
    page.fill("#source", "Tom chases Jerry.")
    page.click("#translate")
    page.wait_for_selector("#heatmaps td.cell")

    # the heatmap has exactly len(target) x len(source) cells, as the API says
    expected = api(
        server, "/v1/translate", {"q": "Tom chases Jerry.", "source": "en", "target": "zh", "beam_size": 4, "n_best": 3}
    )["translations"][0]
    T, S = len(expected["target_tokens"]), len(expected["source_tokens"])
    assert page.locator("#heatmaps td.cell").count() == T * S
    assert page.locator("#translation").inner_text().startswith(expected["text"])

    # hovering a cell shows the two tokens and the weight
    page.hover('#heatmaps td.cell[data-t="0"][data-s="0"]')
    weight = expected["attention"][0][0]
    tooltip = page.locator("#tooltip").inner_text()
    assert f"{weight:.3f}" in tooltip and "→" in tooltip

    # keyboard: arrows move between cells
    page.focus('#heatmaps td.cell[data-t="0"][data-s="0"]')
    page.keyboard.press("ArrowRight")
    assert page.evaluate("document.activeElement.dataset.s") == "1"

    # layer and head pickers (Transformer): one head, then all heads as small multiples
    page.select_option("#layer", "0")
    page.wait_for_selector("text=layer 0, mean of heads")
    page.select_option("#head", "1")
    page.wait_for_selector("text=layer 0, head 1")
    page.select_option("#head", "all")
    page.wait_for_selector(".small-multiples")
    assert page.locator(".small-multiples table.heatmap").count() == 2  # the tiny model has 2 heads

    # word granularity
    page.check('input[name="granularity"][value="word"]')
    page.wait_for_function("document.querySelectorAll('#heatmaps thead th').length === 6")  # corner + 5 words

    # forced decoding
    page.fill("#forced", "汤姆追杰瑞。")
    page.click("#score")
    page.wait_for_selector("#forced-heatmap td.cell")
    assert "Log-probability" in page.locator("#forced-score").inner_text()

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.check('input[name="granularity"][value="subword"]')
    page.wait_for_selector("#heatmaps td.cell")
    page.screenshot(path=str(SCREENSHOTS / "page.png"), full_page=True)
    assert not problems, problems


def test_errors_are_shown_in_words(server: RunningServer, browser: object) -> None:
    page = browser.new_page()  # type: ignore[attr-defined]
    page.goto(server.url + "/")
    page.wait_for_function("document.querySelectorAll('#pair option').length > 0")
    page.fill("#source", "Tom chases Jerry. " * 20)  # over 200 characters
    page.keyboard.press("Control+Enter")  # from the focused text box
    page.wait_for_selector("#error:not([hidden])")
    message = page.locator("#error").inner_text()
    assert message.startswith("Too long:") and "the limit is 200" in message


def test_narrow_screen(server: RunningServer, browser: object) -> None:
    page = browser.new_page(viewport={"width": 360, "height": 740})  # type: ignore[attr-defined]
    page.goto(server.url + "/")
    page.wait_for_function("document.querySelectorAll('#pair option').length > 0")
    page.click("#translate")
    page.wait_for_selector("#heatmaps td.cell")
    # the page itself never scrolls sideways; a wide heatmap scrolls inside its own box
    assert page.evaluate("document.documentElement.scrollWidth") <= 362
    page.screenshot(path=str(SCREENSHOTS / "page-360.png"), full_page=True)


@pytest.fixture(scope="module")
def converted_server(converted_bundles: Path) -> Iterator[RunningServer]:
    running = RunningServer(converted_bundles)
    yield running
    running.stop()


def test_a_converted_model_of_another_pair(converted_server: RunningServer, browser: object) -> None:
    """An OPUS-MT-style English-German bundle: listed by its languages' names, translated, drawn."""
    page = browser.new_page(viewport={"width": 1100, "height": 900})  # type: ignore[attr-defined]
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.goto(converted_server.url + "/")
    page.wait_for_function("document.querySelectorAll('#pair option').length === 2")
    labels = page.locator("#pair option").all_inner_texts()
    assert any(label.startswith("English → German (en-de") for label in labels), labels
    page.select_option("#pair", "en-de")
    page.fill("#source", "Tom chases Jerry.")
    page.click("#translate")
    page.wait_for_selector("#heatmaps td.cell")
    expected = api(converted_server, "/v1/translate", {"q": "Tom chases Jerry.", "model": "en-de", "n_best": 3})
    best = expected["translations"][0]
    assert page.locator("#translation").inner_text().startswith(best["text"])
    assert page.locator("#heatmaps td.cell").count() == len(best["target_tokens"]) * len(best["source_tokens"])
    assert page.locator("#heatmaps thead th").first.is_visible()
    assert ">>deu<<" in page.locator("#heatmaps thead").inner_text()  # the target token's column is shown
    page.screenshot(path=str(SCREENSHOTS / "page-en-de.png"), full_page=True)
    assert not problems, problems
