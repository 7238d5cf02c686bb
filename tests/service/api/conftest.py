from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.settings import Settings


def wait_ready(client: TestClient, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.get("/readyz").status_code == 200:
            return
        time.sleep(0.05)
    raise AssertionError("the app never became ready")


@pytest.fixture(scope="module")
def client(bundle_dir: Path) -> Iterator[TestClient]:
    settings = Settings(bundles=bundle_dir, max_texts=8, max_chars=200, max_body_bytes=4096)
    with TestClient(create_app(settings)) as c:
        wait_ready(c)
        yield c
