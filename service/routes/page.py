"""The web page at `/` and the API docs at `/docs` and `/redoc`, every asset served from here.

The page is plain HTML, CSS and JavaScript in service/static (no build step). Swagger UI and
ReDoc come from the fastapi-offline wheel, whose static folder holds their bundles: no page
loads anything from another host, and each says so in its Content-Security-Policy (inline
scripts allowed by their hashes only).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.resources
import re
from functools import cache
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import FileResponse, HTMLResponse

from service.errors import NotFound

router = APIRouter(include_in_schema=False)

PAGE_DIR = Path(__file__).resolve().parent.parent / "static"
# Every file /static/ serves, and its type: the page's own, then the docs' bundles.
PAGE_FILES = {
    **{
        f"{module}.js": "text/javascript; charset=utf-8"
        for module in ("app", "core", "spans", "translate", "panels", "manage")
    },
    "app.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
DOCS_FILES = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "favicon.png": "image/png",
}
PAGE_CSP = (
    "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
# Swagger UI and ReDoc style elements inline and ReDoc searches in a blob: worker.
DOCS_CSP = (
    "default-src 'self'; script-src {scripts}; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; worker-src 'self' blob:; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'"
)
COMMON = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
ASSET_HEADERS = {**COMMON, "Cache-Control": "no-cache"}  # revalidated: a new release shows
INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.S)


@cache
def docs_dir() -> Path:
    """fastapi-offline's folder of Swagger UI and ReDoc bundles."""
    return Path(str(importlib.resources.files("fastapi_offline") / "static"))


def with_csp(html: str, policy: str = DOCS_CSP) -> HTMLResponse:
    """`html` with a policy that allows its own inline scripts (by sha256) and nothing else."""
    scripts = ["'self'"] + [
        "'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"
        for s in INLINE_SCRIPT.findall(html)
    ]
    headers = {**COMMON, "Content-Security-Policy": policy.format(scripts=" ".join(scripts))}
    return HTMLResponse(html, headers=headers)


@router.get("/")
async def page() -> FileResponse:
    """The page: translate, neighbours, memory, glossary, management."""
    headers = {**ASSET_HEADERS, "Content-Security-Policy": PAGE_CSP}
    return FileResponse(PAGE_DIR / "index.html", media_type="text/html", headers=headers)


@router.get("/static/{name}")
async def asset(name: str) -> FileResponse:
    """A file of the page or of the docs; only the files listed above."""
    if name in PAGE_FILES:
        path, media_type = PAGE_DIR / name, PAGE_FILES[name]
    elif name in DOCS_FILES:
        path, media_type = docs_dir() / name, DOCS_FILES[name]
    else:
        raise NotFound(f"no static file {name!r}")
    return FileResponse(path, media_type=media_type, headers=ASSET_HEADERS)


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    """Swagger UI over /openapi.json."""
    app, root = request.app, request.scope.get("root_path", "")
    html = get_swagger_ui_html(
        openapi_url=root + app.openapi_url,
        title=f"{app.title}: API docs",
        oauth2_redirect_url=root + "/docs/oauth2-redirect",
        swagger_js_url=root + "/static/swagger-ui-bundle.js",
        swagger_css_url=root + "/static/swagger-ui.css",
        swagger_favicon_url=root + "/static/favicon.png",
        # no badge fetched from the public validator
        swagger_ui_parameters={"validatorUrl": None, **(app.swagger_ui_parameters or {})},
    )
    return with_csp(html.body.decode())


@router.get("/docs/oauth2-redirect")
async def swagger_ui_redirect() -> HTMLResponse:
    """Swagger UI's OAuth2 redirect page."""
    return with_csp(get_swagger_ui_oauth2_redirect_html().body.decode())


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    """ReDoc over /openapi.json."""
    app, root = request.app, request.scope.get("root_path", "")
    html = get_redoc_html(
        openapi_url=root + app.openapi_url,
        title=f"{app.title}: API reference",
        redoc_js_url=root + "/static/redoc.standalone.js",
        redoc_favicon_url=root + "/static/favicon.png",
        with_google_fonts=False,
    )
    return with_csp(html.body.decode())
