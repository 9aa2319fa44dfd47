"""Bad bytes after good requests: every complete request is answered, then a 400, then close.
Client errors are logged briefly and rate-limited, never as tracebacks."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import SidecarProcess, Upstream, start_sidecar


@pytest.fixture(scope="module")
def sidecar(
    module_upstream: Upstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SidecarProcess]:
    """One sidecar (outbound and inbound) for the module; its log is read at the end."""
    process = start_sidecar(
        tmp_path_factory.mktemp("pipelining"),
        {"payment": {"url": module_upstream.url, "timeout": 5}},
        app=module_upstream.url,
        log_level="debug",
        cascade={"enabled": False},
    )
    yield process
    process.stop()
    if process.process.stderr is not None:
        process.process.stderr.close()


def exchange(port: int, data: bytes, timeout: float = 15.0) -> bytes:
    """Send raw bytes at once, read until the sidecar closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    return received


def statuses(raw: bytes) -> list[int]:
    """Status codes of the responses in a byte stream, in order."""
    return [int(m) for m in re.findall(rb"HTTP/1\.1 (\d{3}) ", raw)]


GOOD = b"GET %b/slow?s=0.3 HTTP/1.1\r\nhost: x\r\n\r\n"

BAD_FOLLOWERS = {
    "stray byte": b"X",
    "nul garbage": b"\x00garbage\r\n\r\n",
    "not a method": b"FOO BAR BAZ\r\n\r\n",
    "bad header line": b"GET /x HTTP/1.1\r\nno colon here\r\n\r\n",
}


@pytest.mark.parametrize("listener", ["outbound", "inbound"])
@pytest.mark.parametrize("follower", sorted(BAD_FOLLOWERS))
def test_a_good_request_before_bad_bytes_is_answered(
    sidecar: SidecarProcess, listener: str, follower: str
) -> None:
    prefix = b"/payment" if listener == "outbound" else b""
    raw = exchange(sidecar.ports[listener], GOOD % prefix + BAD_FOLLOWERS[follower])
    assert statuses(raw) == [200, 400], raw
    assert b"slow done" in raw
    assert raw.lower().count(b"connection: close") == 1


def test_a_body_longer_than_its_content_length(sidecar: SidecarProcess) -> None:
    raw = exchange(
        sidecar.ports["outbound"],
        b"POST /payment/echo HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\nabcdef\r\n\r\n",
    )
    assert statuses(raw) == [200, 400], raw
    assert b"\r\n\r\nabc" in raw


def test_several_good_requests_then_a_bad_one(sidecar: SidecarProcess) -> None:
    good = b"GET /payment/slow?s=0.1 HTTP/1.1\r\nhost: x\r\n\r\n"
    raw = exchange(sidecar.ports["outbound"], good * 3 + b"\x00\x01\x02")
    assert statuses(raw) == [200, 200, 200, 400], raw


def test_an_upgrade_request_then_a_bad_one(sidecar: SidecarProcess) -> None:
    raw = exchange(
        sidecar.ports["outbound"],
        b"GET /payment/slow?s=0.2 HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\n"
        b"upgrade: h2c\r\n\r\nX\r\n\r\n",
    )
    assert statuses(raw) == [200, 400], raw


@pytest.mark.parametrize(
    "chunks",
    [
        b"zz\r\nabc\r\n0\r\n\r\n",  # not hex
        b"3\r\nabc\r\n-1\r\n\r\n",  # negative, after a good chunk
        b"3\r\nabcdef\r\n0\r\n\r\n",  # more data than the size said
        b"fffffffffffffffffffff\r\n",  # overflows
    ],
)
def test_bad_chunk_sizes_get_400(sidecar: SidecarProcess, chunks: bytes) -> None:
    raw = exchange(
        sidecar.ports["outbound"],
        b"POST /payment/echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n" + chunks,
    )
    assert statuses(raw) == [400], raw
    assert b"connection: close" in raw.lower()


def test_an_upgrade_request_with_a_body_is_refused(sidecar: SidecarProcess) -> None:
    # The parser hands everything after an upgrade request's head to the new protocol: a body
    # there could hide a second request. Never forwarded.
    raw = exchange(
        sidecar.ports["outbound"],
        b"POST /payment/echo HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: h2c\r\n"
        b"content-length: 35\r\n\r\nGET /payment/smuggled HTTP/1.1\r\n\r\n",
    )
    assert statuses(raw) == [400], raw


def test_the_log_has_no_tracebacks_and_few_client_error_lines(
    sidecar: SidecarProcess, tmp_path: Path
) -> None:
    """Runs last in this module: many client errors, then the log is read."""
    for _ in range(20):
        for follower in BAD_FOLLOWERS.values():
            exchange(sidecar.ports["outbound"], b"GET /payment/x HTTP/1.1\r\n\r\n" + follower)
        exchange(
            sidecar.ports["outbound"],
            b"GET /payment/x HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: websocket"
            b"\r\n\r\n\x00bad\r\n\r\n",
        )
    assert sidecar.stop() == 0
    assert sidecar.process.stderr is not None
    log = sidecar.process.stderr.read().decode()
    assert "Traceback" not in log
    assert " ERROR " not in log
    client_lines = [line for line in log.splitlines() if "400 " in line]
    assert 1 <= len(client_lines) <= 5, log
