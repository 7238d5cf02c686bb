"""Retake docs/images/page.png: the page at / translating the tutorial's example with the shipped bundles.

PYTHONPATH=. .venv/bin/python docs/images/screenshot.py   (Debian's chromium and playwright, as the page test)
"""

from __future__ import annotations

import shutil
from pathlib import Path

from playwright.sync_api import sync_playwright

from tests.page.test_browser import FLAGS
from tests.support.server import RunningServer

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    server = RunningServer(ROOT / "bundles")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=FLAGS)
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.goto(server.url + "/")
            page.wait_for_function("document.querySelectorAll('#pair option').length > 0")
            page.fill("#source", "Tom chases Jerry.")
            page.click("#translate")
            page.wait_for_selector("#heatmaps td.cell")
            page.check('input[name="granularity"][value="word"]')
            page.wait_for_timeout(500)
            page.screenshot(path=str(ROOT / "docs" / "images" / "page.png"), full_page=True)
            browser.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
