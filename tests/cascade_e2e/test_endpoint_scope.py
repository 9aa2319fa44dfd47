"""`breaker.scope: endpoint` with the cascade: an endpoint breaker is a root of its own.

    A GET /bad  → B GET /bad   (B answers 502)
    A GET /good → B GET /good  (B answers 200)

B is a plain app; A's breakers for B are per endpoint. When `B GET /bad` opens, only A's
endpoint that needs it is unavailable, and `B GET /good` is still called.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from .apps import Call
from .conftest import app, free_port, get, make_sidecar, start_all, wait_for

pytestmark = pytest.mark.slow


class _Plain(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(502 if self.path.startswith("/bad") else 200)
        self.send_header("content-length", "0")
        self.end_headers()


def test_an_endpoint_breaker_is_the_root_of_its_own_unavailability(tmp_path: Path) -> None:
    plain = ThreadingHTTPServer(("127.0.0.1", free_port()), _Plain)
    threading.Thread(target=plain.serve_forever, args=(0.05,), daemon=True).start()
    a_app = app("A", {"/bad": [Call("B", "/bad")], "/good": [Call("B", "/good")]})
    breaker = {"failure_threshold": 2, "recovery_timeout": 60, "scope": "endpoint"}
    url = f"http://127.0.0.1:{plain.server_address[1]}"
    a = make_sidecar(tmp_path, "A", a_app, {"B": {"url": url, "breaker": breaker}})
    start_all([a])
    try:
        assert get(a.url("inbound") + "/good").status_code == 200
        for _ in range(2):
            assert get(a.url("inbound") + "/bad").status_code == 424
        wait_for(lambda: not a.available("GET /bad"), "A GET /bad unavailable")
        chain = [c["endpoint"] for c in a.availability("GET /bad")["causeChain"]]
        assert chain == ["B GET /bad", "A GET /bad"]
        assert a.available("GET /good")
        assert get(a.url("inbound") + "/good").status_code == 200
        breakers = a.status()["breakers"]["B"]
        assert breakers["state"] == "CLOSED"
        assert breakers["endpoints"]["GET /bad"]["state"] == "OPEN"
    finally:
        a.stop()
        a_app.stop()
        plain.shutdown()
        plain.server_close()
