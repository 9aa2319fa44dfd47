"""An upstream with several instances (`urls:`): round robin, and a call that one instance's
sidecar refused (503 with its `ccb-refusal` mark) goes to the next instance, whatever its
method; real sidecar process, real sockets."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from .conftest import Upstream


class _Refusing(BaseHTTPRequestHandler):
    """An instance whose sidecar refuses everything: 503, with or without its refusal mark."""

    protocol_version = "HTTP/1.1"
    server: _RefusingServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        with self.server.lock:
            self.server.seen += 1
        body = b'{"error": "unavailable"}'
        self.send_response(503)
        if self.server.names_cause:
            self.send_header("ccb-cause", "courier * *, shipping POST /v1/shipments")
        if self.server.marks:  # unsealed: trusted from a loopback upstream without a secret
            self.send_header("ccb-refusal", "endpoint_unavailable -")
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _handle


class _RefusingServer(ThreadingHTTPServer):
    daemon_threads = True
    seen = 0
    names_cause = True
    marks = True
    lock: threading.Lock


@pytest.fixture
def refusing() -> Iterator[_RefusingServer]:
    server = _RefusingServer(("127.0.0.1", 0), _Refusing)
    server.lock = threading.Lock()
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _url(server: _RefusingServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def _config(urls: list[str]) -> dict[str, Any]:
    # The caller's breaker must not open on the refusing instance: only routing is tested.
    return {"p": {"urls": urls, "breaker": {"failure_threshold": 100}}}


def test_calls_go_round_robin_over_the_instances(
    sidecar_factory: Any, upstream: Upstream, module_upstream: Upstream
) -> None:
    sidecar = sidecar_factory(
        _config([upstream.url, module_upstream.url]), cascade={"enabled": False}
    )
    before = len(module_upstream.state.requests)
    for i in range(6):
        response = httpx.get(f"{sidecar.url('outbound')}/p/rr/{i}", timeout=10)
        assert response.status_code == 200
    assert len(upstream.state.requests) == 3
    assert len(module_upstream.state.requests) - before == 3


def test_a_post_refused_by_one_instances_sidecar_goes_to_the_next_with_its_body(
    sidecar_factory: Any, upstream: Upstream, refusing: _RefusingServer
) -> None:
    sidecar = sidecar_factory(_config([_url(refusing), upstream.url]), cascade={"enabled": False})
    for i in range(4):
        body = f'{{"order": {i}}}'.encode()
        response = httpx.post(f"{sidecar.url('outbound')}/p/echo", content=body, timeout=10)
        assert response.status_code == 200, response.text
        assert response.content == body
    assert refusing.seen >= 2  # round robin sent every other call there first
    assert [r["body"] for r in upstream.state.requests] == [
        f'{{"order": {i}}}'.encode() for i in range(4)
    ]
    calls = sidecar.status()["breakers"]["p"]["calls"]
    assert calls["instance_refused"] == refusing.seen
    assert calls.get("failure_status", 0) == 0  # not the upstream's failure: nothing recorded


def test_a_plain_503_to_a_post_is_answered_not_resent(
    sidecar_factory: Any, upstream: Upstream, refusing: _RefusingServer
) -> None:
    """Without the mark nothing says the app did not act: a POST is never sent twice."""
    refusing.names_cause = refusing.marks = False
    sidecar = sidecar_factory(_config([_url(refusing), upstream.url]), cascade={"enabled": False})
    statuses = [
        httpx.post(f"{sidecar.url('outbound')}/p/echo", content=b"x", timeout=10).status_code
        for _ in range(4)
    ]
    assert sorted(statuses) == [200, 200, 503, 503]
    assert refusing.seen == 2
    assert len(upstream.state.requests) == 2


def test_a_cause_header_without_the_mark_is_a_failure_not_a_refusal(
    sidecar_factory: Any, upstream: Upstream, refusing: _RefusingServer
) -> None:
    """Any app can send `ccb-cause`; only the sealed mark hides a 503 from the breaker."""
    refusing.marks = False
    sidecar = sidecar_factory(_config([_url(refusing), upstream.url]), cascade={"enabled": False})
    statuses = [
        httpx.post(f"{sidecar.url('outbound')}/p/echo", content=b"x", timeout=10).status_code
        for _ in range(4)
    ]
    assert sorted(statuses) == [200, 200, 503, 503]
    calls = sidecar.status()["breakers"]["p"]["calls"]
    assert calls["failure_status"] == 2
    assert calls.get("instance_refused", 0) == 0
