"""``/docs`` and ``/redoc`` render offline: a real server and headless Debian chromium with every request that
is not for 127.0.0.1 aborted; Swagger UI still shows the operations and ReDoc its sidebar (their JS and CSS
come from the server)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.constants import CHROMIUM, CHROMIUM_ARGS

pytestmark = [pytest.mark.integration, pytest.mark.browser]



def test_docs_pages_reference_local_assets_only(client: TestClient) -> None:
    for page in ("/docs", "/redoc"):
        html = client.get(page).text
        assert "cdn.jsdelivr.net" not in html and "fonts.googleapis.com" not in html
    assert client.get("/docs-static/swagger-ui-bundle.js").status_code == 200
    assert client.get("/docs-static/swagger-ui.css").headers["content-type"].startswith("text/css")


def test_no_script_of_the_docs_pages_loads_anything_from_another_host(client: TestClient) -> None:
    """ReDoc's script as shipped draws Redocly's logo from cdn.redoc.ly; the served one loads nothing remote."""
    for page in ("/docs", "/redoc"):
        for src in re.findall(r'<script src="([^"]+)"', client.get(page).text):
            script = client.get(src)
            assert script.status_code == 200 and script.text, src
            assert not re.findall(r"""\bsrc:\s*["']https?://""", script.text), f"{src} loads from another host"
    import fastapi_offline

    shipped = Path(fastapi_offline.__file__).parent / "static" / "redoc.standalone.js"
    assert "cdn.redoc.ly" in shipped.read_text(), "the shipped script changed: revisit engram_pipeline/api/docs.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_docs_pages_render_without_network(tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} not found: install it with `apt-get install -y chromium`")
        pytest.skip(f"{CHROMIUM} not found")
    from playwright.sync_api import sync_playwright

    port = _free_port()
    env = {**os.environ, "ENGRAM_EMBEDDER": "hashing", "ENGRAM_DB_URI": str(tmp_path / "store")}
    server = subprocess.Popen(
        [sys.executable, "-m", "engram_pipeline.api", "--port", str(port)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and server.poll() is None, "the server did not start"
            time.sleep(0.2)

        aborted: list[str] = []
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page()

                def only_local(route, request) -> None:  # type: ignore[no-untyped-def]
                    if urlsplit(request.url).hostname == "127.0.0.1":
                        route.continue_()
                    else:
                        aborted.append(request.url)
                        route.abort()

                page.route("**/*", only_local)
                page.goto(f"{base}/docs")
                page.wait_for_selector(".opblock", timeout=30_000)
                paths = page.locator(".opblock-summary-path").all_inner_texts()
                page.screenshot(path=str(tmp_path / "docs.png"), full_page=True)
                page.goto(f"{base}/redoc")  # its sidebar once fetched Redocly's logo from their CDN
                page.get_by_text("API docs by Redocly").wait_for(timeout=30_000)
                redoc = page.content()
            finally:
                browser.close()
        flat = {p.replace("\u200b", "") for p in paths}
        assert {"/v1/memories", "/v1/memories/recall", "/v1/memories/{memory_id}", "/readyz"} <= flat, flat
        assert "/v1/memories/recall" in redoc
        assert aborted == []  # nothing on either page even tried to leave the host
    finally:
        server.terminate()
        server.wait(timeout=30)
