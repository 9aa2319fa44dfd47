"""Malformed, smuggling-prone and oversize requests on raw sockets; a bounded parser fuzz run."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import SidecarProcess, Upstream, start_sidecar


@pytest.fixture(scope="module")
def sidecar(
    module_upstream: Upstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SidecarProcess]:
    """One sidecar for the module, with small header limits."""
    process = start_sidecar(
        tmp_path_factory.mktemp("bad-input"),
        {"payment": {"url": module_upstream.url, "timeout": 5}},
        limits={"max_header_bytes": 4096, "max_header_count": 20},
    )
    yield process
    process.stop()
    if process.process.stderr is not None:
        process.process.stderr.close()


def exchange(port: int, data: bytes, timeout: float = 10.0, half_close: bool = False) -> bytes:
    """Send raw bytes, read until the sidecar closes (or the deadline)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(data)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the sidecar may close before reading everything
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    return received


def alive(sidecar: SidecarProcess) -> bool:
    """The process still serves requests."""
    response = httpx.get(sidecar.url("outbound") + "/payment/alive", timeout=10)
    return sidecar.process.poll() is None and response.status_code == 200


@pytest.mark.parametrize(
    "raw",
    [
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS ClientHello
        b"GET /payment/x HTTP/9.9\r\n\r\n",
        b"GET /payment/x\r\nhost: x\r\n\r\n",
        b"GET /payment/x HTTP/1.1\r\nbad header line\r\n\r\n",
        b"GET /payment/x HTTP/1.1\r\nhost: x\r\ncontent-length: abc\r\n\r\n",
        b"GET /pay ment/x HTTP/1.1\r\nhost: x\r\n\r\n",
        b"\r\n\r\n\x00\x00\x00",
    ],
)
def test_malformed_request_gets_400_and_close(sidecar: SidecarProcess, raw: bytes) -> None:
    response = exchange(sidecar.ports["outbound"], raw)
    assert response.startswith(b"HTTP/1.1 400 ")
    assert b"connection: close" in response.lower()
    assert alive(sidecar)


@pytest.mark.parametrize(
    "raw",
    [
        # CL.TE and TE.CL: both framings at once.
        b"POST /payment/echo HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\n"
        b"transfer-encoding: chunked\r\n\r\n0\r\n\r\nGET /payment/smuggled HTTP/1.1\r\n\r\n",
        b"POST /payment/echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n"
        b"content-length: 4\r\n\r\n5c\r\nGET /payment/smuggled HTTP/1.1\r\n\r\n0\r\n\r\n",
        # Two different Content-Length values.
        b"POST /payment/echo HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\n"
        b"content-length: 40\r\n\r\nabcd",
        # Obfuscated transfer-encoding.
        b"POST /payment/echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: xchunked\r\n\r\n0\r\n\r\n",
        b"POST /payment/echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n"
        b"transfer-encoding: identity\r\n\r\n0\r\n\r\n",
    ],
)
def test_smuggling_prone_framing_gets_400(
    sidecar: SidecarProcess, module_upstream: Upstream, raw: bytes
) -> None:
    response = exchange(sidecar.ports["outbound"], raw)
    assert response.startswith(b"HTTP/1.1 400 ")
    assert not any("smuggled" in r["path"] for r in module_upstream.state.requests)
    assert alive(sidecar)


def test_oversize_headers_get_431(sidecar: SidecarProcess) -> None:
    raw = b"GET /payment/x HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 8000 + b"\r\n\r\n"
    response = exchange(sidecar.ports["outbound"], raw)
    assert response.startswith(b"HTTP/1.1 431 ")
    assert alive(sidecar)


def test_oversize_head_never_finished_gets_431(sidecar: SidecarProcess) -> None:
    raw = b"GET /payment/x HTTP/1.1\r\nx-endless: " + b"a" * 20000  # no end of line, ever
    response = exchange(sidecar.ports["outbound"], raw)
    assert response.startswith(b"HTTP/1.1 431 ")


def test_too_many_headers_get_431(sidecar: SidecarProcess) -> None:
    headers = b"".join(b"x-h%d: v\r\n" % i for i in range(30))
    response = exchange(
        sidecar.ports["outbound"], b"GET /payment/x HTTP/1.1\r\n" + headers + b"\r\n"
    )
    assert response.startswith(b"HTTP/1.1 431 ")
    assert alive(sidecar)


def test_oversize_url_gets_431(sidecar: SidecarProcess) -> None:
    raw = b"GET /payment/" + b"a" * 10000 + b" HTTP/1.1\r\nhost: x\r\n\r\n"
    assert exchange(sidecar.ports["outbound"], raw).startswith(b"HTTP/1.1 431 ")


def test_connect_method_is_refused(sidecar: SidecarProcess) -> None:
    response = exchange(sidecar.ports["outbound"], b"CONNECT payment:443 HTTP/1.1\r\n\r\n")
    assert response.startswith(b"HTTP/1.1 405 ")
    assert alive(sidecar)


def test_keep_alive_survives_a_404(sidecar: SidecarProcess) -> None:
    with httpx.Client(timeout=10) as client:
        assert client.get(sidecar.url("outbound") + "/nowhere/x").status_code == 404
        assert (
            client.post(sidecar.url("outbound") + "/nowhere/x", content=b"body").status_code == 404
        )
        assert client.get(sidecar.url("outbound") + "/payment/x").status_code == 200


def test_client_vanishing_mid_request_is_harmless(sidecar: SidecarProcess) -> None:
    with socket.create_connection(("127.0.0.1", sidecar.ports["outbound"]), timeout=10) as sock:
        sock.sendall(b"POST /payment/echo HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\nab")
    with socket.create_connection(("127.0.0.1", sidecar.ports["outbound"]), timeout=10) as sock:
        sock.sendall(b"GET /payment/slow?s=0.2 HTTP/1.1\r\nhost: x\r\n\r\n")
    assert alive(sidecar)


_TOKENS = st.sampled_from(
    [
        b"GET",
        b"POST",
        b" ",
        b"/payment/x",
        b"http://payment/y",
        b"HTTP/1.1",
        b"HTTP/1.0",
        b"\r\n",
        b"\n",
        b"host: payment",
        b"content-length: 3",
        b"content-length: -1",
        b"transfer-encoding: chunked",
        b"connection: close",
        b"0\r\n\r\n",
        b"abc",
        b":",
        b"\x00",
        b"expect: 100-continue",
        b"upgrade: h2c",
        b"connection: upgrade",
    ]
)


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.one_of(st.binary(max_size=300), st.lists(_TOKENS, max_size=30).map(b"".join)))
def test_fuzzed_requests_never_kill_the_sidecar(sidecar: SidecarProcess, data: bytes) -> None:
    response = exchange(sidecar.ports["outbound"], data + b"\r\n\r\n", timeout=5, half_close=True)
    if response:
        assert response.startswith(b"HTTP/1.1 ")
    assert sidecar.process.poll() is None


def test_sidecar_alive_after_the_fuzz_run(sidecar: SidecarProcess, tmp_path: Path) -> None:
    assert alive(sidecar)


def test_half_closed_client_still_gets_its_response(sidecar: SidecarProcess) -> None:
    raw = b"GET /payment/slow?s=0.2 HTTP/1.1\r\nhost: x\r\n\r\n"
    response = exchange(sidecar.ports["outbound"], raw, half_close=True)
    assert response.startswith(b"HTTP/1.1 200 ")
    assert response.endswith(b"slow done")
