"""A client's slowness is the client's problem: 408, never a failure of the upstream's breaker."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from .conftest import SidecarProcess, Upstream

# The upstream would time out first if its clock ran while the client stalls.
_UPSTREAM = {"timeout": 0.5, "breaker": {"failure_threshold": 2, "recovery_timeout": 60}}
_LIMITS = {"body_timeout": 1.5, "min_body_rate": 100}


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return data


def _calls(sidecar: SidecarProcess, route: str = "payment") -> dict[str, int]:
    status = sidecar.status()
    if route == "inbound":
        calls: dict[str, int] = status["inbound"]
    else:
        calls = status["breakers"][route]["calls"]
    return calls


def _breaker_state(sidecar: SidecarProcess) -> str:
    state: str = sidecar.status()["breakers"]["payment"]["state"]
    return state


@pytest.fixture
def stalling(sidecar_factory: Any, upstream: Upstream) -> SidecarProcess:
    """A sidecar whose outbound and inbound listeners both lead to the scriptable upstream."""
    sidecar: SidecarProcess = sidecar_factory(
        {"payment": {"url": upstream.url, **_UPSTREAM}},
        app=upstream.url,
        limits=_LIMITS,
        cascade={"enabled": False},
    )
    return sidecar


@pytest.mark.parametrize("listener", ["outbound", "inbound"])
def test_a_body_that_never_comes_is_408_not_an_upstream_failure(
    stalling: SidecarProcess, listener: str
) -> None:
    path = b"/payment/echo" if listener == "outbound" else b"/echo"
    for _ in range(3):  # more than the failure threshold
        with socket.create_connection(("127.0.0.1", stalling.ports[listener]), timeout=20) as s:
            s.sendall(b"POST " + path + b" HTTP/1.1\r\nhost: x\r\ncontent-length: 100000\r\n\r\n")
            response = _read_all(s)
        assert response.startswith(b"HTTP/1.1 408 "), response[:200]
        assert b"connection: close" in response.lower()
    calls = _calls(stalling, "payment" if listener == "outbound" else "inbound")
    assert calls["timeout"] == 0
    assert calls["client_timeout"] == 3
    assert _breaker_state(stalling) == "CLOSED"
    response = httpx.post(stalling.url("outbound") + "/payment/echo", content=b"fine", timeout=10)
    assert response.status_code == 200
    assert response.content == b"fine"


@pytest.mark.parametrize("listener", ["outbound", "inbound"])
def test_a_trickling_body_is_cut_with_408(stalling: SidecarProcess, listener: str) -> None:
    path = b"/payment/echo" if listener == "outbound" else b"/echo"
    with socket.create_connection(("127.0.0.1", stalling.ports[listener]), timeout=30) as s:
        s.sendall(b"POST " + path + b" HTTP/1.1\r\nhost: x\r\ncontent-length: 100000\r\n\r\n")
        response = b""
        s.settimeout(0.4)
        for _ in range(200):  # one byte every 0.4 s: never idle, far below the minimum rate
            try:
                s.sendall(b"x")
                response += s.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if response:
                break
        s.settimeout(20)
        response += _read_all(s)
    assert response.startswith(b"HTTP/1.1 408 "), response[:200]
    calls = _calls(stalling, "payment" if listener == "outbound" else "inbound")
    assert calls["timeout"] == 0
    assert calls["client_timeout"] == 1
    assert _breaker_state(stalling) == "CLOSED"


def test_a_slow_but_steady_upload_is_not_cut(stalling: SidecarProcess) -> None:
    """Above the minimum rate an upload may take longer than body_timeout."""
    body = b"y" * 600
    with socket.create_connection(("127.0.0.1", stalling.ports["outbound"]), timeout=30) as s:
        s.sendall(b"POST /payment/echo HTTP/1.1\r\nhost: x\r\ncontent-length: 600\r\n\r\n")
        for offset in range(0, 600, 150):  # ~1 s for 600 bytes, 4 x the minimum rate
            s.sendall(body[offset : offset + 150])
            time.sleep(0.25)
        s.sendall(b"")
        response = b""
        while not response.endswith(body):
            chunk = s.recv(65536)
            assert chunk, response
            response += chunk
    assert response.startswith(b"HTTP/1.1 200 ")
    assert _calls(stalling)["client_timeout"] == 0


@pytest.fixture
def deaf_upstream() -> Iterator[int]:
    """An upstream that accepts connections and never reads or answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    server.close()


def test_an_upstream_that_stops_reading_the_body_is_its_own_timeout(
    sidecar_factory: Any, deaf_upstream: int
) -> None:
    """The upstream's clock runs once it stops taking the body: 504, a failure of its own."""
    sidecar: SidecarProcess = sidecar_factory(
        {"payment": {"url": f"http://127.0.0.1:{deaf_upstream}", **_UPSTREAM}},
        limits=_LIMITS,
        cascade={"enabled": False},
    )
    size = 64 << 20
    with socket.create_connection(("127.0.0.1", sidecar.ports["outbound"]), timeout=30) as s:
        s.sendall(b"POST /payment/echo HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % size)
        s.setblocking(False)
        piece = b"z" * 65536
        sent = 0
        response = b""
        deadline = time.monotonic() + 60
        while not response and time.monotonic() < deadline:
            # Send while the sidecar reads us; it stops once the upstream takes no more.
            readable, writable, _ = select.select([s], [s] if sent < size else [], [], 1.0)
            try:
                if readable:
                    response += s.recv(65536)
                elif writable:
                    sent += s.send(piece)
            except BlockingIOError:
                pass
            except OSError:
                break
        s.settimeout(20)
        response += _read_all(s)
    assert response.startswith(b"HTTP/1.1 504 "), response[:200]
    assert sent < size
    calls = _calls(sidecar)
    assert calls["timeout"] == 1
    assert calls["client_timeout"] == 0
