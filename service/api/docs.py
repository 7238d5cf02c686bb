"""/docs (Swagger UI) and /redoc from assets the service serves itself, not from a CDN.

The assets come from the fastapi-offline package (Swagger UI and ReDoc bundles, kept current
with FastAPI's defaults); the page works on a machine with no internet, as the service does.
Both pages start with an inline script or style, so each answer carries its own policy: its
scripts run by a fresh nonce (see service/api/security.py's docs_policy).
"""

from __future__ import annotations

import secrets
from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from service.api.security import docs_policy

ASSETS = Path(fastapi_offline.__file__).parent / "static"
PREFIX = "/docs-assets"


def with_nonce(page: HTMLResponse) -> HTMLResponse:
    """The page with a fresh nonce on its scripts and a policy that lets only those run."""
    nonce = secrets.token_urlsafe(16)
    html = bytes(page.body).decode().replace("<script", f'<script nonce="{nonce}"')
    return HTMLResponse(html, headers={"content-security-policy": docs_policy(nonce)})


def install_docs(app: FastAPI) -> None:
    app.mount(PREFIX, StaticFiles(directory=ASSETS), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        page = get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=f"{app.title}: API",
            swagger_js_url=f"{PREFIX}/swagger-ui-bundle.js",
            swagger_css_url=f"{PREFIX}/swagger-ui.css",
            swagger_favicon_url=f"{PREFIX}/favicon.png",
        )
        return with_nonce(page)

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        page = get_redoc_html(
            openapi_url="/openapi.json",
            title=f"{app.title}: API",
            redoc_js_url=f"{PREFIX}/redoc.standalone.js",
            redoc_favicon_url=f"{PREFIX}/favicon.png",
            with_google_fonts=False,
        )
        return with_nonce(page)
