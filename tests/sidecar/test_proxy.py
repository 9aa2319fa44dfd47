"""Outbound and inbound forwarding through a real sidecar process, with real clients."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import requests
import yaml

from .conftest import SidecarProcess, Upstream, start_sidecar, start_upstream


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    """One upstream for the module (its record is cleared before each test)."""
    up = start_upstream()
    yield up
    up.state.release.set()
    up.server.shutdown()
    up.server.server_close()


@pytest.fixture(autouse=True)
def _fresh_upstream_record(upstream: Upstream) -> None:
    upstream.state.requests.clear()
    upstream.state.upload_chunks.clear()
    upstream.state.release.clear()


@pytest.fixture(scope="module")
def sidecar(
    upstream: Upstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SidecarProcess]:
    """One sidecar for the module: `payment` and the local app are the test upstream."""
    process = start_sidecar(
        tmp_path_factory.mktemp("proxy"),
        {"payment": {"url": upstream.url, "timeout": 5}},
        app=upstream.url,
    )
    yield process
    process.stop()
    if process.process.stderr is not None:
        process.process.stderr.close()


def calls(sidecar: SidecarProcess, upstream: str = "payment") -> dict[str, int]:
    """The sidecar's call counts for an upstream."""
    result: dict[str, int] = sidecar.status()["breakers"][upstream]["calls"]
    return result


def test_path_form_strips_the_upstream_segment(sidecar: SidecarProcess, upstream: Upstream) -> None:
    response = httpx.get(sidecar.url("outbound") + "/payment/v1/charges?limit=2")
    assert response.status_code == 200
    assert response.text == "ok /v1/charges?limit=2"
    assert response.headers["via"] == "1.1 checkout"
    assert upstream.state.requests[-1]["path"] == "/v1/charges?limit=2"


def test_query_right_after_the_upstream_name(sidecar: SidecarProcess) -> None:
    response = httpx.get(sidecar.url("outbound") + "/payment?x=1")
    assert response.text == "ok /?x=1"


def test_requests_with_http_proxy_env(
    sidecar: SidecarProcess, upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", sidecar.url("outbound"))
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with requests.Session() as session:
        first = session.get("http://payment/v1/refunds/7", timeout=10)
        second = session.post("http://payment/echo", data=b"pay me", timeout=10)
    assert first.status_code == 200
    assert first.text == "ok /v1/refunds/7"
    assert second.content == b"pay me"
    # The proxy client named the upstream by host; the upstream sees its own authority.
    host = dict(upstream.state.requests[-1]["headers"])["host"]
    assert host == f"127.0.0.1:{upstream.port}"


def test_host_header_names_the_upstream(sidecar: SidecarProcess) -> None:
    response = httpx.get(sidecar.url("outbound") + "/v1/x", headers={"host": "payment"})
    assert response.text == "ok /v1/x"


def test_unknown_upstream_is_404_json_naming_it(sidecar: SidecarProcess) -> None:
    response = httpx.get(sidecar.url("outbound") + "/shipping/v1/parcels")
    assert response.status_code == 404
    assert response.json() == {"error": "unknown upstream", "upstream": "shipping"}


def test_each_request_on_a_connection_reaches_its_own_upstream(
    sidecar_factory: Any, upstream: Upstream
) -> None:
    """Upstreams named by path and by Host, alternating on one connection, with unknown ones
    between: the upstream (and the Host's name) of one request never leaks into the next."""
    sidecar = sidecar_factory(
        {name: {"url": upstream.url, "timeout": 5} for name in ("payment", "ledger")}
    )
    calls = [
        ("/payment/a", None, 200),
        ("/ledger/b", None, 200),
        ("/ledger/c", None, 200),
        ("/shipping/d", None, 404),
        ("/ledger/e", None, 200),
        ("/v1/f", "payment", 200),
        ("/v1/g", "Ledger:8080", 200),
        ("/v1/h", "shipping", 404),  # not an upstream: the path's first segment, v1, is not
        ("/payment/i", "shipping", 200),
        ("/payment/j", "ledger", 200),  # the Host names an upstream: the path goes to it whole
        ("/Payment/k", None, 200),
    ]
    with httpx.Client(timeout=10) as client:
        for path, host, status in calls:
            headers = {"host": host} if host else {}
            response = client.get(sidecar.url("outbound") + path, headers=headers)
            assert response.status_code == status, path
    seen = [r["path"] for r in upstream.state.requests]
    assert seen == ["/a", "/b", "/c", "/e", "/v1/f", "/v1/g", "/i", "/payment/j", "/k"]
    breakers = sidecar.status()["breakers"]
    assert breakers["payment"]["calls"]["success"] == 4
    assert breakers["ledger"]["calls"]["success"] == 5


def test_hop_by_hop_headers_are_not_forwarded(sidecar: SidecarProcess) -> None:
    headers = {
        "connection": "keep-alive, x-secret-hop",
        "x-secret-hop": "1",
        "keep-alive": "5",
        "te": "trailers",
        "proxy-authorization": "Basic eA==",
        "x-end-to-end": "yes",
        "upgrade": "h2c",
    }
    response = httpx.get(sidecar.url("outbound") + "/payment/headers", headers=headers)
    seen = dict(response.json()["headers"])
    for hop in ("x-secret-hop", "keep-alive", "te", "proxy-authorization", "upgrade"):
        assert hop not in seen
    assert seen["x-end-to-end"] == "yes"
    assert seen["via"] == "1.1 checkout"


def test_post_body_with_content_length(sidecar: SidecarProcess) -> None:
    body = b"x" * 300_000
    response = httpx.post(sidecar.url("outbound") + "/payment/echo", content=body)
    assert response.status_code == 200
    assert response.content == body


def test_chunked_request_body_is_streamed_upstream(sidecar: SidecarProcess) -> None:
    def pieces() -> Any:
        for i in range(50):
            yield f"piece {i};".encode()

    response = httpx.post(sidecar.url("outbound") + "/payment/echo", content=pieces())
    assert response.status_code == 200
    assert response.content == b"".join(f"piece {i};".encode() for i in range(50))


def test_chunked_response_streams_before_the_upstream_finishes(
    sidecar: SidecarProcess, upstream: Upstream
) -> None:
    with httpx.stream(
        "GET", sidecar.url("outbound") + "/payment/stream?n=3", timeout=10
    ) as response:
        assert response.headers["transfer-encoding"] == "chunked"
        stream = response.iter_raw()
        first = next(stream)
        # The upstream is still holding the rest back: the sidecar did not buffer it.
        assert first == b"first\n"
        upstream.state.release.set()
        rest = b"".join(stream)
    assert rest == b"chunk 0\nchunk 1\nchunk 2\n"


def test_large_response_body(sidecar: SidecarProcess) -> None:
    response = httpx.get(sidecar.url("outbound") + "/payment/big?size=3000000", timeout=20)
    assert len(response.content) == 3_000_000


def test_head_request_keeps_content_length(sidecar: SidecarProcess) -> None:
    with httpx.Client() as client:
        head = client.head(sidecar.url("outbound") + "/payment/whatever")
        after = client.get(sidecar.url("outbound") + "/payment/after")
    assert head.status_code == 200
    assert head.headers["content-length"] == str(len(b"ok /whatever"))
    assert after.text == "ok /after"


def test_keep_alive_connection_serves_many_requests(sidecar: SidecarProcess) -> None:
    before = calls(sidecar)["success"]
    with httpx.Client() as client:
        for i in range(20):
            assert client.get(sidecar.url("outbound") + f"/payment/n/{i}").text == f"ok /n/{i}"
    status = sidecar.status()
    assert status["breakers"]["payment"]["calls"]["success"] == before + 20
    assert status["breakers"]["payment"]["connections"]["open"] >= 1


def test_pipelined_requests_are_answered_in_order(sidecar: SidecarProcess) -> None:
    port = sidecar.ports["outbound"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            b"GET /payment/one HTTP/1.1\r\nhost: x\r\n\r\n"
            b"GET /payment/two HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
        )
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.count(b"HTTP/1.1 200") == 2
    assert data.index(b"ok /one") < data.index(b"ok /two")


def test_expect_continue_is_answered_by_the_sidecar(sidecar: SidecarProcess) -> None:
    port = sidecar.ports["outbound"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            b"POST /payment/echo HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n"
            b"expect: 100-continue\r\nconnection: close\r\n\r\n"
        )
        interim = sock.recv(1024)
        assert interim.startswith(b"HTTP/1.1 100 Continue")
        sock.sendall(b"hello")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200")
    assert data.endswith(b"hello")


def test_inbound_forwards_to_the_app_with_forwarded_for(
    sidecar: SidecarProcess, upstream: Upstream
) -> None:
    response = httpx.get(sidecar.url("inbound") + "/orders/42/items")
    assert response.status_code == 200
    assert response.text == "ok /orders/42/items"
    seen = dict(upstream.state.requests[-1]["headers"])
    assert seen["x-forwarded-for"] == "127.0.0.1"
    service = yaml.safe_load(sidecar.config_path.read_text())["service"]
    assert seen["via"] == f"1.1 {service}"
    assert seen["host"] == f"127.0.0.1:{sidecar.ports['inbound']}"  # the caller's Host, kept
    # The next request on another connection gets the same lines (made once per address).
    assert httpx.get(sidecar.url("inbound") + "/orders/43").status_code == 200
    again = dict(upstream.state.requests[-1]["headers"])
    assert (again["x-forwarded-for"], again["via"]) == (seen["x-forwarded-for"], seen["via"])
    assert sidecar.status()["inbound"]["success"] >= 1


def test_upstream_error_status_passes_through(sidecar: SidecarProcess) -> None:
    before = calls(sidecar)
    response = httpx.get(sidecar.url("outbound") + "/payment/status/418")
    assert response.status_code == 418
    response = httpx.get(sidecar.url("outbound") + "/payment/status/500")
    assert response.status_code == 500
    after = calls(sidecar)
    assert after["success"] == before["success"] + 1  # 4xx is not a failure by default
    assert after["failure_status"] == before["failure_status"] + 1


def test_admin_endpoints(sidecar: SidecarProcess) -> None:
    admin = sidecar.url("admin")
    assert httpx.get(admin + "/healthz").json() == {"status": "ok"}
    assert httpx.get(admin + "/readyz").status_code == 200
    httpx.get(sidecar.url("outbound") + "/payment/x")
    status = httpx.get(admin + "/status").json()
    assert status["service"] == "checkout"
    assert status["breakers"]["payment"]["state"] == "CLOSED"
    metrics = httpx.get(admin + "/metrics").text
    success = 'ccb_sidecar_calls_total{direction="outbound",outcome="success",upstream="payment"}'
    assert f"{success} {float(calls(sidecar)['success'])}" in metrics
    assert 'ccb_sidecar_breaker_state{state="closed",upstream="payment"} 1.0' in metrics
    assert "ccb_sidecar_rejections_total" in metrics
    assert "ccb_sidecar_call_duration_seconds_bucket" in metrics
    assert httpx.get(admin + "/nope").status_code == 404
    with httpx.Client(timeout=10) as client:
        head = client.head(admin + "/status")
        assert (head.status_code, head.content) == (200, b"")
        assert client.get(admin + "/healthz").json() == {"status": "ok"}  # same connection
    json.loads(httpx.get(admin + "/status").content)


def test_chunked_request_reaches_the_upstream_before_it_ends(
    sidecar: SidecarProcess, upstream: Upstream
) -> None:
    with socket.create_connection(("127.0.0.1", sidecar.ports["outbound"]), timeout=10) as sock:
        sock.sendall(
            b"POST /payment/upload HTTP/1.1\r\nhost: x\r\n"
            b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n5\r\nfirst\r\n"
        )
        deadline = time.monotonic() + 10
        while not upstream.state.upload_chunks:
            assert time.monotonic() < deadline, "the first piece never reached the upstream"
            time.sleep(0.01)
        # The upstream holds the first piece while the client has not finished: streamed.
        assert upstream.state.upload_chunks == [b"first"]
        sock.sendall(b"6\r\nsecond\r\n0\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200")
    assert data.endswith(b"2 pieces")
    assert upstream.state.upload_chunks == [b"first", b"second"]


def test_close_delimited_response_is_rechunked(sidecar: SidecarProcess) -> None:
    with httpx.Client(timeout=10) as client:
        response = client.get(sidecar.url("outbound") + "/payment/close-delimited")
        assert response.text == "until the end"
        assert response.headers["transfer-encoding"] == "chunked"
        assert client.get(sidecar.url("outbound") + "/payment/after").text == "ok /after"


def test_http10_client_gets_a_close_delimited_body(sidecar: SidecarProcess) -> None:
    with socket.create_connection(("127.0.0.1", sidecar.ports["outbound"]), timeout=10) as sock:
        sock.sendall(b"GET /payment/close-delimited HTTP/1.0\r\nhost: x\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"transfer-encoding" not in head.lower()
    assert body == b"until the end"


def test_upstream_answering_before_the_body_ends(sidecar: SidecarProcess) -> None:
    # The upstream answers /early without reading the body; the sidecar must not reuse that
    # connection (its request was cut short) and later calls must still work.
    with socket.create_connection(("127.0.0.1", sidecar.ports["outbound"]), timeout=10) as sock:
        sock.sendall(
            b"POST /payment/early HTTP/1.1\r\nhost: x\r\n"
            b"transfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n"
        )
        data = b""
        while not data.endswith(b"too large") and (chunk := sock.recv(65536)):
            data += chunk
    assert data.startswith(b"HTTP/1.1 413")
    with httpx.Client(timeout=10) as client:
        for i in range(5):
            assert client.get(sidecar.url("outbound") + f"/payment/n/{i}").text == f"ok /n/{i}"


def test_mesh_shape_client_sidecar_to_server_sidecar(
    sidecar_factory: Any, upstream: Upstream
) -> None:
    server = sidecar_factory({}, app=upstream.url, service="payment")
    client = sidecar_factory({"payment": {"url": server.url("inbound"), "timeout": 5}})
    with httpx.Client(timeout=10) as http:
        response = http.post(client.url("outbound") + "/payment/echo", content=b"through two")
        assert response.content == b"through two"
        assert http.get(client.url("outbound") + "/payment/v1/x").text == "ok /v1/x"
    vias = [v for k, v in upstream.state.requests[-1]["headers"] if k == "via"]
    assert vias == ["1.1 checkout", "1.1 payment"]
    assert client.status()["breakers"]["payment"]["calls"]["success"] == 2
    assert server.status()["inbound"]["success"] == 2


def test_http10_keep_alive_client(sidecar: SidecarProcess) -> None:
    with socket.create_connection(("127.0.0.1", sidecar.ports["outbound"]), timeout=10) as sock:
        for name in (b"one", b"two"):
            sock.sendall(b"GET /payment/" + name + b" HTTP/1.0\r\nconnection: keep-alive\r\n\r\n")
            data = b""
            while not data.endswith(b"ok /" + name):
                chunk = sock.recv(65536)
                assert chunk, "the sidecar closed a keep-alive HTTP/1.0 connection"
                data += chunk
            assert b"connection: keep-alive" in data.lower()


def _read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_http10_and_http11_requests_on_one_connection_are_framed_each_for_its_version(
    sidecar: SidecarProcess,
) -> None:
    """An undelimited body reaches a kept-alive HTTP/1.0 client delimited by close, never
    chunked, and an HTTP/1.1 one chunked: each request's version is its own, whatever the
    requests before it on the connection said."""
    with socket.create_connection(("127.0.0.1", sidecar.ports["outbound"]), timeout=10) as sock:
        sock.sendall(
            b"GET /payment/one HTTP/1.1\r\nhost: x\r\n\r\n"
            b"GET /payment/close-delimited HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"
        )
        data = _read_until_closed(sock)
    first, _, second = data.partition(b"ok /one")
    assert first.startswith(b"HTTP/1.1 200") and b"content-length: 7" in first.lower()
    head, _, body = second.partition(b"\r\n\r\n")
    assert b"transfer-encoding" not in head.lower()
    assert b"connection: close" in head.lower()
    assert body == b"until the end"

    with socket.create_connection(("127.0.0.1", sidecar.ports["outbound"]), timeout=10) as sock:
        sock.sendall(
            b"GET /payment/one HTTP/1.0\r\nconnection: keep-alive\r\n\r\n"
            b"GET /payment/close-delimited HTTP/1.1\r\nhost: x\r\n\r\n"
            b"GET /payment/two HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
        )
        data = _read_until_closed(sock)
    first, _, rest = data.partition(b"ok /one")
    assert b"connection: keep-alive" in first.lower()
    second, _, third = rest.partition(b"0\r\n\r\n")
    assert b"transfer-encoding: chunked" in second.lower()
    assert b"until the end" in second
    assert third.startswith(b"HTTP/1.1 200") and third.endswith(b"ok /two")
    assert b"connection: close" in third.lower()


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_slow_client_gets_a_big_body_without_the_sidecar_buffering_it(
    sidecar: SidecarProcess,
) -> None:
    size = 40_000_000
    before = _rss_kb(sidecar.process.pid)
    received = 0
    with socket.create_connection(("127.0.0.1", sidecar.ports["outbound"]), timeout=30) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sock.sendall(
            b"GET /payment/big?size=%d HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n" % size
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(4096)
        head, _, rest = head.partition(b"\r\n\r\n")
        received = len(rest)
        peak = before
        while chunk := sock.recv(16384):
            received += len(chunk)
            if received % (1 << 20) < 16384:
                peak = max(peak, _rss_kb(sidecar.process.pid))
                time.sleep(0.005)  # a slow reader: the sidecar must pause the upstream
    assert b"content-length: %d" % size in head.lower()
    assert received == size
    # Backpressure kept the body out of the sidecar's memory (it never held 40 MB).
    assert peak - before < 20_000
    # The upstream connection paused for the slow client goes back to the pool readable.
    with httpx.Client(timeout=10) as client:
        for i in range(3):
            assert client.get(sidecar.url("outbound") + f"/payment/n/{i}").text == f"ok /n/{i}"


def test_big_upload_to_a_slow_upstream_is_not_buffered(sidecar: SidecarProcess) -> None:
    size = 40_000_000
    before = _rss_kb(sidecar.process.pid)
    peak = before
    piece = b"u" * 65536
    with socket.create_connection(("127.0.0.1", sidecar.ports["outbound"]), timeout=30) as sock:
        sock.sendall(
            b"POST /payment/slow-drain HTTP/1.1\r\nhost: x\r\nconnection: close\r\n"
            b"content-length: %d\r\n\r\n" % size
        )
        sent = 0
        while sent < size:
            part = piece[: size - sent]
            sock.sendall(part)
            sent += len(part)
            if sent % (1 << 22) < len(part):
                peak = max(peak, _rss_kb(sidecar.process.pid))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200")
    assert data.endswith(b"%d" % size)
    assert peak - before < 20_000  # the sidecar stopped reading while the upstream lagged
