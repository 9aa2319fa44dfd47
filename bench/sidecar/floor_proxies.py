"""The floors of any Python proxy on uvloop: a byte relay, and a minimal httptools proxy.

    python bench/sidecar/floor_proxies.py relay PORT UPSTREAM_PORT
    python bench/sidecar/floor_proxies.py httptools PORT UPSTREAM_PORT

`relay` forwards bytes both ways with no HTTP at all: the floor of any Python proxy on this event
loop. `httptools` is the least an HTTP/1.1 proxy in Python does: parse the request and the
response with httptools (the sidecar's parser), keep the headers, write each head again; no
limits, framing rules, pooling or logic, GET only. Each client connection gets its own upstream
connection (what a keep-alive pool gives a closed-loop client). Whatever either costs, per
request, in CPU, latency or memory, no proxy written on httptools + uvloop can go under: the
sidecar's cost above `httptools` is its own (`python -m bench sidecar` and
bench/sidecar/instructions.py run both beside the sidecar and nginx).
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import Any, cast

import httptools


class RelayUpstream(asyncio.Protocol):
    """The upstream side of a byte relay: what it reads, the client's side writes."""

    transport: asyncio.Transport

    def __init__(self, client: RelayClient) -> None:
        self.client = client

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the transport."""
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        """Pass the bytes on."""
        self.client.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        """Close the other side too."""
        self.client.transport.close()


class RelayClient(asyncio.Protocol):
    """The client's side: connects upstream, holding what arrives before that is done."""

    transport: asyncio.Transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Connect upstream in the background."""
        self.transport = cast(asyncio.Transport, transport)
        self.upstream: RelayUpstream | None = None
        self.held: list[bytes] = []
        asyncio.get_running_loop().create_task(self.join())

    def data_received(self, data: bytes) -> None:
        """Pass the bytes on, or hold them until the upstream connection is up."""
        if self.upstream is None:
            self.held.append(data)
        else:
            self.upstream.transport.write(data)

    async def join(self) -> None:
        """Open the upstream connection and send what was held."""
        loop = asyncio.get_running_loop()
        _, up = await loop.create_connection(lambda: RelayUpstream(self), "127.0.0.1", UPSTREAM)
        self.upstream = up
        for data in self.held:
            up.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        """Close the other side too."""
        if self.upstream is not None:
            self.upstream.transport.close()


class MinimalUpstream(asyncio.Protocol):
    """The upstream side of the minimal proxy: parse the response, write its head again."""

    transport: asyncio.Transport

    def __init__(self, client: MinimalClient) -> None:
        self.client = client
        self.parser: Any = httptools.HttpResponseParser(self)
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the transport."""
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        """Feed the parser."""
        self.parser.feed_data(data)

    def on_header(self, name: bytes, value: bytes) -> None:
        """httptools: one header."""
        self.headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        """httptools: a piece of the body."""
        self.body += body

    def on_message_complete(self) -> None:
        """httptools: the whole response; write it to the client."""
        parts = [b"HTTP/1.1 %d OK\r\n" % self.parser.get_status_code()]
        for name, value in self.headers:
            parts += (name, b": ", value, b"\r\n")
        parts += (b"\r\n", self.body)
        self.headers, self.body = [], b""
        self.client.transport.write(b"".join(parts))

    def connection_lost(self, exc: Exception | None) -> None:
        """The upstream went away: so does the client."""
        self.client.transport.close()


class MinimalClient(asyncio.Protocol):
    """The client side of the minimal proxy: parse the request, write its head upstream."""

    transport: asyncio.Transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Start parsing; connect upstream in the background."""
        self.transport = cast(asyncio.Transport, transport)
        self.parser: Any = httptools.HttpRequestParser(self)
        self.headers: list[tuple[bytes, bytes]] = []
        self.upstream: MinimalUpstream | None = None
        self.held: list[bytes] = []
        self.url = b"/"
        asyncio.get_running_loop().create_task(self.join())

    async def join(self) -> None:
        """Open the upstream connection and send what was held."""
        loop = asyncio.get_running_loop()
        _, self.upstream = await loop.create_connection(
            lambda: MinimalUpstream(self), "127.0.0.1", UPSTREAM
        )
        for head in self.held:
            self.upstream.transport.write(head)

    def data_received(self, data: bytes) -> None:
        """Feed the parser."""
        self.parser.feed_data(data)

    def on_url(self, url: bytes) -> None:
        """httptools: the request target."""
        self.url = url

    def on_header(self, name: bytes, value: bytes) -> None:
        """httptools: one header."""
        self.headers.append((name, value))

    def on_message_complete(self) -> None:
        """httptools: the whole request; write its head upstream (GET: no body)."""
        parts = [b"GET ", self.url, b" HTTP/1.1\r\n"]
        for name, value in self.headers:
            parts += (name, b": ", value, b"\r\n")
        parts.append(b"\r\n")
        self.headers = []
        if self.upstream is None:
            self.held.append(b"".join(parts))
        else:
            self.upstream.transport.write(b"".join(parts))

    def connection_lost(self, exc: Exception | None) -> None:
        """The client went away: drop its upstream connection."""
        if self.upstream is not None:
            self.upstream.transport.close()


UPSTREAM = 0  # the upstream's port on 127.0.0.1, set by main()
PROXIES: dict[str, type[asyncio.Protocol]] = {"relay": RelayClient, "httptools": MinimalClient}


async def serve(kind: str, port: int) -> None:
    """Serve until SIGTERM."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(PROXIES[kind], "127.0.0.1", port)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    server.close()


def main(argv: list[str]) -> int:
    """`relay|httptools PORT UPSTREAM_PORT`."""
    global UPSTREAM
    if len(argv) != 3 or argv[0] not in PROXIES:
        print(f"usage: floor_proxies.py {{{','.join(PROXIES)}}} PORT UPSTREAM_PORT")
        return 2
    UPSTREAM = int(argv[2])
    try:
        import uvloop
    except ImportError:  # as the sidecar does
        asyncio.run(serve(argv[0], int(argv[1])))
    else:
        uvloop.run(serve(argv[0], int(argv[1])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
