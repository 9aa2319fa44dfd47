"""A client that half-closes (sends its requests, then EOF) gets every complete request
answered, even when the bytes after them are an unfinished request (found by the chaos run's
fuzzing client: the answer to a complete request was lost)."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator

import pytest

from .conftest import SidecarProcess, Upstream, start_sidecar


@pytest.fixture(scope="module")
def sidecar(
    module_upstream: Upstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SidecarProcess]:
    process = start_sidecar(
        tmp_path_factory.mktemp("half-close"),
        {"payment": {"url": module_upstream.url, "timeout": 5}},
        app=module_upstream.url,
    )
    yield process
    process.stop()
    if process.process.stderr is not None:
        process.process.stderr.close()


def half_closed(port: int, data: bytes) -> bytes:
    """Send `data`, shut our side down, read until the sidecar closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


def statuses(raw: bytes) -> list[int]:
    return [int(s) for s in re.findall(rb"HTTP/1\.1 (\d{3}) ", raw)]


SLOW = b"GET %b/slow?s=0.3 HTTP/1.1\r\nhost: x\r\n\r\n"
CHUNKED = (
    b"POST %b/echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
)
UNFINISHED = {
    "a head cut short": b"POST /v1/charges HTTP",
    "a head without its blank line": b"GET /v1/charges/2 HTTP/1.1\r\nhost: x\r\n",
    "a body cut short": b"POST /v1/charges HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nabc",
    "chunks without the last": (
        b"POST /x HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel"
    ),
}


@pytest.mark.parametrize("listener", ["outbound", "inbound"])
@pytest.mark.parametrize("unfinished", sorted(UNFINISHED))
def test_complete_requests_before_an_unfinished_one_are_answered(
    sidecar: SidecarProcess, listener: str, unfinished: str
) -> None:
    prefix = b"/payment" if listener == "outbound" else b""
    raw = half_closed(sidecar.ports[listener], SLOW % prefix + UNFINISHED[unfinished])
    assert statuses(raw)[:1] == [200], raw
    assert b"slow done" in raw


def test_every_complete_request_is_answered_in_order(sidecar: SidecarProcess) -> None:
    data = SLOW % b"/payment" + CHUNKED % b"/payment" + UNFINISHED["a body cut short"]
    raw = half_closed(sidecar.ports["outbound"], data)
    assert statuses(raw)[:2] == [200, 200], raw
    assert raw.index(b"slow done") < raw.index(b"hello")
