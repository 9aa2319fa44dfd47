"""A connection that never sends a byte is closed after `header_timeout`, like one that sends
half a head: silence is the slowest request head of all (found by the chaos run's slow
clients, which held their connections for `idle_timeout` instead)."""

from __future__ import annotations

import select
import socket
from collections.abc import Iterator

import pytest

from .conftest import SidecarProcess, Upstream, start_sidecar


@pytest.fixture(scope="module")
def sidecar(
    module_upstream: Upstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SidecarProcess]:
    process = start_sidecar(
        tmp_path_factory.mktemp("silent"),
        {"payment": {"url": module_upstream.url, "timeout": 5}},
        limits={"header_timeout": 1, "idle_timeout": 300},
    )
    yield process
    process.stop()
    if process.process.stderr is not None:
        process.process.stderr.close()


def test_a_silent_connection_is_closed_long_before_the_idle_timeout(
    sidecar: SidecarProcess,
) -> None:
    with socket.create_connection(("127.0.0.1", sidecar.ports["outbound"]), timeout=5) as sock:
        readable, _, _ = select.select([sock], [], [], 60)  # 1 s expected; 300 s if broken
        assert readable, "still open a minute later"
        assert sock.recv(1024) == b""  # closed without a reply: there was no request


def test_a_kept_alive_connection_idles_for_the_idle_timeout(sidecar: SidecarProcess) -> None:
    """After a request, waiting for the next one is idling: header_timeout does not apply."""
    with socket.create_connection(("127.0.0.1", sidecar.ports["outbound"]), timeout=10) as sock:
        sock.sendall(b"GET /payment/x HTTP/1.1\r\nhost: x\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        readable, _, _ = select.select([sock], [], [], 3)  # three header_timeouts
        assert not readable, sock.recv(1024)
        sock.sendall(b"GET /payment/y HTTP/1.1\r\nhost: x\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
