"""``/docs`` (Swagger UI) and ``/redoc`` served with their JavaScript and CSS from this process, so the
pages render without reaching a CDN (an air-gapped host, a browser behind a strict proxy).

The asset files come from the ``fastapi-offline`` package (Swagger UI 5, which reads OpenAPI 3.1, and ReDoc);
the pages themselves are FastAPI's own ``get_swagger_ui_html`` and ``get_redoc_html`` pointed at them.
ReDoc's script draws Redocly's logo from their CDN in its sidebar footer: it is served with that one URL
replaced by an empty ``data:`` URL, an image that does not load, which ReDoc then hides (its ``onError``).
"""

from __future__ import annotations

import functools
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

STATIC_URL = "/docs-static"
REDOC_JS = "redoc.standalone.js"
REDOC_CDN_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"


def _static_dir() -> Path:
    import fastapi_offline

    return Path(fastapi_offline.__file__).parent / "static"


@functools.cache
def _redoc_js() -> bytes:
    """ReDoc's script with its one request to another host (the CDN logo) taken out."""
    return (_static_dir() / REDOC_JS).read_bytes().replace(REDOC_CDN_LOGO.encode(), b"data:,")


def add_offline_docs(app: FastAPI, *, title: str) -> None:
    """Mount the Swagger UI and ReDoc assets and serve ``/docs`` and ``/redoc`` from them (create the app
    with ``docs_url=None, redoc_url=None``)."""

    # before the mount, which would otherwise answer this path with the file as shipped
    @app.get(f"{STATIC_URL}/{REDOC_JS}", include_in_schema=False)
    def redoc_js() -> Response:
        return Response(_redoc_js(), media_type="text/javascript")

    app.mount(STATIC_URL, StaticFiles(directory=_static_dir()), name="docs-static")
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=root + openapi_url,
            title=f"{title} - Swagger UI",
            swagger_js_url=f"{root}{STATIC_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{STATIC_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{STATIC_URL}/favicon.png",
            # no validator badge: it is an image fetched from the validator's public site
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=root + openapi_url,
            title=f"{title} - ReDoc",
            redoc_js_url=f"{root}{STATIC_URL}/{REDOC_JS}",
            redoc_favicon_url=f"{root}{STATIC_URL}/favicon.png",
            with_google_fonts=False,
        )
