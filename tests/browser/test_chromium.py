"""The browser tier works: Debian's chromium, driven by Playwright, renders a loopback page."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

pytestmark = pytest.mark.browser

PAGE = b"""<!doctype html><title>probe</title>
<button data-testid="go" onclick="document.body.dataset.clicked='yes'">go</button>"""


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_chromium_renders_and_clicks(page: Any, site: str) -> None:
    page.goto(site)
    page.get_by_test_id("go").click()
    assert page.evaluate("document.body.dataset.clicked") == "yes"
    assert page.title() == "probe"
