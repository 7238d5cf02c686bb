"""The web page in a real headless Chromium (Debian's), against a real `attention-mt serve`."""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.settings import DEFAULT_BUNDLES
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


# Waits are functions ("() => ..."), not expressions: Playwright polls an expression with eval,
# which the page's policy refuses (rightly).
# CSP violations, as the page sees them (an init script runs outside the page's policy)
WATCH_CSP = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(`${e.effectiveDirective} ${e.blockedURI}`);
});
"""


def watch(page: object) -> list[str]:
    """The page's errors and console errors from now on (CSP refusals are console errors too);
    `violations(page)` has the CSP events."""
    problems: list[str] = []
    page.add_init_script(WATCH_CSP)  # type: ignore[attr-defined]
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)  # type: ignore[attr-defined]
    page.on("pageerror", lambda e: problems.append(str(e)))  # type: ignore[attr-defined]
    return problems


def violations(page: object) -> list[str]:
    return list(page.evaluate("window.__csp"))  # type: ignore[attr-defined]


def translated(browser: object, url: str, text: str) -> tuple[Any, list[str]]:
    """A desktop-sized page of the service at `url` that has translated `text` and drawn its
    heatmap, and the problems it reports (`watch`)."""
    page = browser.new_page(viewport={"width": 1100, "height": 900})  # type: ignore[attr-defined]
    problems = watch(page)
    page.goto(url + "/")
    page.wait_for_function("() => document.querySelectorAll('#pair option').length > 0")
    page.fill("#source", text)
    page.click("#translate")
    page.wait_for_selector("#heatmaps td.cell")
    return page, problems


def api(server: RunningServer, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        server.url + path, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        return json.loads(r.read())


def test_translate_and_look_at_the_attention(server: RunningServer, browser: object) -> None:
    page, problems = translated(browser, server.url, "Tom chases Jerry.")

    # the heatmap has exactly len(target) x len(source) cells, as the API says
    expected = api(
        server, "/v1/translate", {"q": "Tom chases Jerry.", "source": "en", "target": "zh", "beam_size": 4, "n_best": 3}
    )["translations"][0]
    T, S = len(expected["target_tokens"]), len(expected["source_tokens"])
    assert page.locator("#heatmaps td.cell").count() == T * S
    assert page.locator("#translation").inner_text().startswith(expected["text"])
    assert page.locator("#rerank-control").is_hidden()  # no zh-en model here to rerank with

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
    page.wait_for_function("() => document.querySelectorAll('#heatmaps thead th').length === 6")  # corner + 5 words

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
    assert not violations(page)  # the page works under its strict policy


@pytest.fixture(scope="module")
def shipped_server() -> Iterator[RunningServer]:
    running = RunningServer(DEFAULT_BUNDLES)
    yield running
    running.stop()


def test_rerank_with_the_reverse_model(shipped_server: RunningServer, browser: object) -> None:
    page = browser.new_page(viewport={"width": 1100, "height": 900})  # type: ignore[attr-defined]
    problems = watch(page)
    page.goto(shipped_server.url + "/")
    page.wait_for_function("() => document.querySelectorAll('#pair option').length > 0")
    assert page.locator("#rerank-control").is_visible()  # en-zh, and zh-en to score with
    text = "Mary went to Shanghai last week to see her grandmother."
    page.fill("#source", text)
    page.check("#rerank")
    page.click("#translate")
    page.wait_for_selector("#heatmaps td.cell")
    expected = api(shipped_server, "/v1/translate", {"q": text, "model": "en-zh", "n_best": 3, "rerank": True})
    best = expected["translations"][0]
    assert page.locator("#translation").inner_text().startswith(best["text"])
    plain = api(shipped_server, "/v1/translate", {"q": text, "model": "en-zh"})["translations"][0]["text"]
    assert plain != best["text"]  # the shipped en-zh drops "to see" unless reranked (docs/models.md)
    T, S = len(best["target_tokens"]), len(best["source_tokens"])
    assert page.locator("#heatmaps td.cell").count() == T * S
    # another head is read through /v1/attention, which decodes the same reranked translation
    page.select_option("#head", "0")
    page.wait_for_selector("text=layer 1, head 0")  # the bundle's default view is layer 1
    assert page.locator("#heatmaps td.cell").count() == T * S
    assert not problems, problems
    assert not violations(page)


def test_errors_are_shown_in_words(server: RunningServer, browser: object) -> None:
    page = browser.new_page()  # type: ignore[attr-defined]
    page.goto(server.url + "/")
    page.wait_for_function("() => document.querySelectorAll('#pair option').length > 0")
    page.fill("#source", "Tom chases Jerry. " * 20)  # over 200 characters
    page.keyboard.press("Control+Enter")  # from the focused text box
    page.wait_for_selector("#error:not([hidden])")
    message = page.locator("#error").inner_text()
    assert message.startswith("Too long:") and "the limit is 200" in message


def test_narrow_screen(server: RunningServer, browser: object) -> None:
    page = browser.new_page(viewport={"width": 360, "height": 740})  # type: ignore[attr-defined]
    page.goto(server.url + "/")
    page.wait_for_function("() => document.querySelectorAll('#pair option').length > 0")
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
    page.wait_for_function("() => document.querySelectorAll('#pair option').length === 2")
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


def test_the_api_docs_work_offline(server: RunningServer, browser: object) -> None:
    """Swagger UI and ReDoc come from the service itself: no CDN, so no internet needed."""
    page = browser.new_page(viewport={"width": 1100, "height": 900})  # type: ignore[attr-defined]
    problems = watch(page)
    outside: list[str] = []
    page.on("request", lambda r: outside.append(r.url) if not r.url.startswith(server.url) else None)
    page.goto(server.url + "/docs")
    page.wait_for_selector(".opblock", timeout=30_000)
    listed = page.locator(".opblock-summary-path").all_inner_texts()
    assert {"/v1/translate", "/v1/attention", "/translate", "/languages"} <= {p.strip() for p in listed}
    refused = violations(page)
    page.goto(server.url + "/redoc")
    page.wait_for_selector('text="/v1/translate"', timeout=30_000)
    refused += violations(page)
    # ReDoc's footer fetches its maker's logo from a CDN; the page does not need it (nothing else leaves)
    assert not [u for u in outside if not u.startswith(("data:", "blob:")) and "redoc/logo" not in u], outside
    # under their own policy (an inline script by nonce) nothing is refused but that logo, if anything
    assert not [v for v in refused if "redoc/logo" not in v], refused
    assert not [p for p in problems if "redoc/logo" not in p], problems


def test_a_paragraph_shows_its_sentence_boundaries(server: RunningServer, browser: object) -> None:
    page, _ = translated(browser, server.url, "Tom chases Jerry. Mary likes John today.")
    expected = api(
        server, "/v1/translate", {"q": "Tom chases Jerry. Mary likes John today.", "model": "en-zh", "n_best": 3}
    )
    [_, second] = expected["translations"][0]["segments"]
    assert page.locator("#heatmaps tbody tr.segment-start").count() == 1
    first_row_of_second = page.locator("#heatmaps tbody tr").nth(second["target_tokens"]["start"])
    assert "segment-start" in (first_row_of_second.get_attribute("class") or "")
    assert page.locator("#heatmaps thead th.segment-start").count() == 1
    page.select_option("#head", "all")  # the other views keep the boundaries
    page.wait_for_selector(".small-multiples tr.segment-start")


KEY = "browser-test-key-0123456789"


@pytest.fixture(scope="module")
def keyed_server(bundle_dir: Path) -> Iterator[RunningServer]:
    running = RunningServer(bundle_dir, env={"MT_API_KEYS": json.dumps([KEY])})
    yield running
    running.stop()


def test_with_api_keys_the_page_asks_for_one(keyed_server: RunningServer, browser: object) -> None:
    """The page loads without a key, asks for one on the API's 401, keeps it in the tab and sends it."""
    context = browser.new_context(viewport={"width": 1100, "height": 900})  # type: ignore[attr-defined]
    page = context.new_page()
    problems = watch(page)
    keys_sent: list[tuple[str, str | None]] = []
    page.on("request", lambda r: keys_sent.append((r.url, r.headers.get("x-api-key"))) if "/v1/" in r.url else None)
    page.goto(keyed_server.url + "/")
    page.wait_for_selector("#key-section:not([hidden])")
    assert page.evaluate("document.activeElement.id") == "api-key"
    page.fill("#api-key", "not-the-key")
    page.click("#key-form button")
    page.wait_for_selector("text=That key was not accepted")
    page.fill("#api-key", KEY)
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.querySelectorAll('#pair option').length > 0")  # the call asked again
    assert page.locator("#key-section").is_hidden()
    page.click("#translate")
    page.wait_for_selector("#heatmaps td.cell")
    assert page.evaluate("sessionStorage.getItem('attention-mt.api-key')") == KEY
    translations = [key for url, key in keys_sent if url.endswith("/v1/translate")]
    assert translations == [KEY], keys_sent
    refused = violations(page)

    # the tab keeps it: a reload asks nothing; another tab has its own storage and asks again
    page.reload()
    page.wait_for_function("() => document.querySelectorAll('#pair option').length > 0")
    assert page.locator("#key-section").is_hidden()
    other = context.new_page()
    problems_elsewhere = watch(other)
    other.goto(keyed_server.url + "/")
    other.wait_for_selector("#key-section:not([hidden])")

    # the 401s before a key are the only errors; nothing broke the policy
    assert not [p for p in problems + problems_elsewhere if "401" not in p], problems + problems_elsewhere
    assert not refused + violations(page) + violations(other)
    context.close()


@pytest.fixture(scope="module", params=[5.0, 0.0], ids=["informative", "chance"])
def measured_server(
    request: pytest.FixtureRequest, bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    """The tiny bundle with a measured omission flag: informative (a high threshold, so the tiny
    model flags words), or found no better than chance (threshold 0: nothing flagged)."""
    from export.omission import write_flag
    from service.engine.manifest import OmissionFlag

    root = tmp_path_factory.mktemp("measured")
    shutil.copytree(bundle_dir / "en-zh", root / "en-zh")
    flag = OmissionFlag(
        threshold=request.param, precision=0.42, recall=0.31, dropped_share=0.12, content_words=900, measured_on="t"
    )
    write_flag(root / "en-zh", flag)
    running = RunningServer(root)
    yield running
    running.stop()


def test_the_underline_note_quotes_the_models_measurement(measured_server: RunningServer, browser: object) -> None:
    answer = api(measured_server, "/v1/translate", {"q": "Tom chases Jerry.", "model": "en-zh"})["translations"][0]
    informative = answer["signals"]["unattended_threshold"] > 0
    assert bool(answer["signals"]["unattended_source"]) == informative
    page, problems = translated(browser, measured_server.url, "Tom chases Jerry.")
    note = page.locator("#unattended-note").inner_text()
    if informative:
        assert "42% of words underlined this way were missing" in note, note
        assert "12% of all words" in note and "31% of the missing words" in note, note
    else:
        assert note.startswith("No words are underlined for this model"), note
        assert page.locator("#heatmaps th.unattended").count() == 0
    assert not problems, problems
