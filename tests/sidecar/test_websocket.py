"""WebSockets pass through the sidecar as a tunnel: a real aiohttp server and client."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from .conftest import SidecarProcess, free_port


class WebSocketUpstream:
    """An aiohttp app in its own thread: `/ws` echoes, `/plain` is HTTP, `/refuse` is 403."""

    def __init__(self) -> None:
        self.port = free_port()
        self.handshakes = 0
        self.closed = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_get("/ws", self._echo)
        app.router.add_get("/plain", self._plain)
        app.router.add_get("/refuse", self._refuse)
        self._runner = web.AppRunner(app)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        self._loop.run_until_complete(site.start())
        self._ready.set()
        self._loop.run_forever()

    async def _echo(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.handshakes += 1
        async for message in ws:
            if message.type == aiohttp.WSMsgType.TEXT:
                await ws.send_str("echo: " + message.data)
            elif message.type == aiohttp.WSMsgType.BINARY:
                await ws.send_bytes(message.data)
        self.closed.set()
        return ws

    async def _plain(self, request: web.Request) -> web.Response:
        upgrade = request.headers.get("upgrade", "-")
        return web.Response(text=f"plain, upgrade={upgrade}")

    async def _refuse(self, request: web.Request) -> web.Response:
        return web.Response(status=403, text="no websocket for you")

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(10)

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture
def ws_upstream() -> Iterator[WebSocketUpstream]:
    """A WebSocket-capable upstream for one test."""
    upstream = WebSocketUpstream()
    upstream.start()
    yield upstream
    upstream.stop()


@pytest.fixture
def ws_sidecar(sidecar_factory: Any, ws_upstream: WebSocketUpstream) -> SidecarProcess:
    """A sidecar whose outbound `payment` and inbound app are the WebSocket upstream."""
    url = f"http://127.0.0.1:{ws_upstream.port}"
    sidecar: SidecarProcess = sidecar_factory(
        {"payment": {"url": url, "timeout": 0.5}},
        app=url,
        limits={"idle_timeout": 0.5},  # a tunnel is not an idle keep-alive connection
    )
    return sidecar


async def _talk(url: str) -> list[Any]:
    """Open a WebSocket, exchange text and a large binary message, close."""
    big = bytes(range(256)) * 8192  # 2 MiB: backpressure on both hops
    async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
        await ws.send_str("hello")
        first = await ws.receive_str(timeout=10)
        await asyncio.sleep(1.2)  # longer than idle_timeout and the upstream's timeout
        await ws.send_bytes(big)
        echoed = await ws.receive_bytes(timeout=30)
        await ws.send_str("bye")
        last = await ws.receive_str(timeout=10)
    return [first, echoed == big, last]


@pytest.mark.parametrize("listener", ["outbound", "inbound"])
def test_a_websocket_is_tunnelled(
    ws_sidecar: SidecarProcess, ws_upstream: WebSocketUpstream, listener: str
) -> None:
    path = "/payment/ws" if listener == "outbound" else "/ws"
    url = f"ws://127.0.0.1:{ws_sidecar.ports[listener]}{path}"
    assert asyncio.run(_talk(url)) == ["echo: hello", True, "echo: bye"]
    assert ws_upstream.closed.wait(10)  # the client's close reached the upstream
    assert ws_upstream.handshakes == 1
    if listener == "outbound":
        calls = ws_sidecar.status()["breakers"]["payment"]["calls"]
        assert calls["success"] == 1
        assert calls["timeout"] == 0


def test_a_refused_handshake_leaves_plain_http(
    ws_sidecar: SidecarProcess, ws_upstream: WebSocketUpstream
) -> None:
    """The upstream says no (403): the client gets that, and the connection goes on as HTTP."""
    with socket.create_connection(("127.0.0.1", ws_sidecar.ports["outbound"]), timeout=10) as s:
        s.sendall(
            b"GET /payment/refuse HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\n"
            b"upgrade: websocket\r\nsec-websocket-version: 13\r\n"
            b"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
            b"GET /payment/plain HTTP/1.1\r\nhost: x\r\n\r\n"
        )
        data = b""
        while b"plain, upgrade=-" not in data:
            chunk = s.recv(65536)
            assert chunk, data
            data += chunk
    assert data.startswith(b"HTTP/1.1 403 ")
    assert b"no websocket for you" in data


def test_other_upgrades_are_served_as_http_1_1(ws_sidecar: SidecarProcess) -> None:
    """h2c and friends are not spoken here: Upgrade is hop-by-hop and dropped."""
    with socket.create_connection(("127.0.0.1", ws_sidecar.ports["outbound"]), timeout=10) as s:
        s.sendall(
            b"GET /payment/plain HTTP/1.1\r\nhost: x\r\nconnection: upgrade, http2-settings\r\n"
            b"upgrade: h2c\r\nhttp2-settings: AAMAAABkAAQAAP__\r\n\r\n"
        )
        data = b""
        while b"upgrade=-" not in data:
            chunk = s.recv(65536)
            assert chunk, data
            data += chunk
    assert data.startswith(b"HTTP/1.1 200 ")


async def _wait_closed(url: str) -> aiohttp.WSMsgType:
    """Open a WebSocket, stay silent, return what ends it."""
    async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
        message = await ws.receive(timeout=30)
        return message.type


def test_an_idle_tunnel_is_closed(sidecar_factory: Any, ws_upstream: WebSocketUpstream) -> None:
    sidecar: SidecarProcess = sidecar_factory(
        {"payment": {"url": f"http://127.0.0.1:{ws_upstream.port}"}},
        limits={"tunnel_idle_timeout": 0.5},
    )
    url = f"ws://127.0.0.1:{sidecar.ports['outbound']}/payment/ws"
    ended = asyncio.run(_wait_closed(url))
    assert ended in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.ERROR)
    assert ws_upstream.closed.wait(10)


def test_sigterm_cuts_tunnels_when_the_grace_ends(
    sidecar_factory: Any, ws_upstream: WebSocketUpstream
) -> None:
    sidecar: SidecarProcess = sidecar_factory(
        {"payment": {"url": f"http://127.0.0.1:{ws_upstream.port}"}}, shutdown_grace=0.5
    )
    url = f"ws://127.0.0.1:{sidecar.ports['outbound']}/payment/ws"
    result: list[aiohttp.WSMsgType] = []
    client = threading.Thread(target=lambda: result.append(asyncio.run(_wait_closed(url))))
    client.start()
    while ws_upstream.handshakes == 0:
        assert client.is_alive()
        threading.Event().wait(0.02)
    assert sidecar.stop() == 0
    client.join(20)
    assert result and result[0] != aiohttp.WSMsgType.TEXT
