"""Upstreams that misbehave on the wire: the sidecar answers 502 (or cuts the body) and lives on."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import SidecarProcess, start_sidecar


class ScriptedUpstream:
    """Reads one request head per connection and answers with whatever bytes the test set."""

    def __init__(self) -> None:
        self.reply = b""
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                if self.reply == b"RESET":
                    conn.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                    )
                    return
                conn.sendall(self.reply)
            except OSError:
                return

    def close(self) -> None:
        self.listener.close()


@pytest.fixture(scope="module")
def scripted() -> Iterator[ScriptedUpstream]:
    """One scripted upstream for the module."""
    upstream = ScriptedUpstream()
    yield upstream
    upstream.close()


@pytest.fixture(scope="module")
def sidecar(
    scripted: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SidecarProcess]:
    """A sidecar in front of the scripted upstream (the breaker never trips here)."""
    process = start_sidecar(
        tmp_path_factory.mktemp("bad-upstream"),
        {
            "weird": {
                "url": f"http://127.0.0.1:{scripted.port}",
                "timeout": 1,
                "breaker": {"failure_threshold": 1_000_000},
            }
        },
    )
    yield process
    process.stop()
    if process.process.stderr is not None:
        process.process.stderr.close()


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    """One client for the module: building one per call costs more than the call."""
    with httpx.Client(timeout=10) as http:
        yield http


def call(sidecar: SidecarProcess, client: httpx.Client) -> httpx.Response | None:
    """One GET through the sidecar; None when the response was cut off."""
    try:
        return client.get(sidecar.url("outbound") + "/weird/x")
    except httpx.HTTPError:
        return None


@pytest.mark.parametrize(
    "reply",
    [
        b"this is not http\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\nabcd",
        b"HTTP/1.1 200 OK\r\ncontent-length: nope\r\n\r\n",
        b"HTTP/1.1 999999 Huge\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n",
        b"RESET",
        b"",  # closes without a byte
    ],
)
def test_unusable_reply_is_502(
    sidecar: SidecarProcess, scripted: ScriptedUpstream, client: httpx.Client, reply: bytes
) -> None:
    scripted.reply = reply
    response = call(sidecar, client)
    assert response is not None
    assert response.status_code == 502
    assert response.json()["upstream"] == "weird"
    assert sidecar.process.poll() is None


def test_body_cut_short_is_cut_for_the_client(
    sidecar: SidecarProcess, scripted: ScriptedUpstream, client: httpx.Client
) -> None:
    scripted.reply = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly a part"
    response = call(sidecar, client)
    # Never a complete-looking response with a wrong body: either an error or a cut stream.
    assert response is None or response.status_code == 502
    scripted.reply = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n"
    response = call(sidecar, client)
    assert response is None or response.status_code == 502
    assert sidecar.process.poll() is None


def test_valid_reply_after_the_bad_ones(
    sidecar: SidecarProcess, scripted: ScriptedUpstream, client: httpx.Client
) -> None:
    scripted.reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
    response = call(sidecar, client)
    assert response is not None
    assert (response.status_code, response.text) == (200, "ok")


_PIECES = st.sampled_from(
    [
        b"HTTP/1.1 ",
        b"HTTP/1.0 ",
        b"200 OK",
        b"204 No Content",
        b"304 Not Modified",
        b"100 Continue",
        b"\r\n",
        b"\n",
        b"content-length: 5",
        b"content-length: -1",
        b"transfer-encoding: chunked",
        b"connection: close",
        b"connection: keep-alive, x-a",
        b"x-a: 1",
        b"hello",
        b"5\r\nhello\r\n",
        b"0\r\n\r\n",
        b"\x00",
        b":",
        b"upgrade: websocket",
    ]
)


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(reply=st.one_of(st.binary(max_size=200), st.lists(_PIECES, max_size=25).map(b"".join)))
def test_fuzzed_upstream_replies_never_kill_the_sidecar(
    sidecar: SidecarProcess, scripted: ScriptedUpstream, client: httpx.Client, reply: bytes
) -> None:
    scripted.reply = reply
    response = call(sidecar, client)
    if response is not None:
        assert 100 <= response.status_code <= 599
    assert sidecar.process.poll() is None
