"""The transparent listener: connections the app never addressed to the sidecar.

`ccb netinit` REDIRECTs the app's outbound TCP here; the kernel keeps the address the app dialled
(`SO_ORIGINAL_DST`). A destination that is an upstream's `url` host:port (names resolved to
addresses, refreshed) is served as HTTP through that upstream's route: breaker, cascade, pool,
exactly like the outbound listener. Any other destination is relayed byte for byte, or refused
when `interception.unknown_destinations: refuse`. The sidecar's own connections must not be
redirected back here: netinit exempts its uid.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections import Counter
from typing import Final, cast
from urllib.parse import urlsplit

from cascadebreaker.sidecar.config import HostPort, InterceptionConfig
from cascadebreaker.sidecar.http.connection import ServerConnection
from cascadebreaker.sidecar.http.exchange import Exchange, RequestHead
from cascadebreaker.sidecar.http.limits import ConnectionTracker, Limits
from cascadebreaker.sidecar.http.wire import error_response
from cascadebreaker.sidecar.proxy.exchange import ProxyExchange
from cascadebreaker.sidecar.proxy.hooks import Direction
from cascadebreaker.sidecar.proxy.replies import FixedExchange
from cascadebreaker.sidecar.proxy.routes import Route
from cascadebreaker.sidecar.proxy.runtime import SidecarRuntime

log = logging.getLogger("cascadebreaker.sidecar.proxy.transparent")

SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h; IP6T_SO_ORIGINAL_DST has the same number
_RELAY_CHUNK_HIGH = 256 * 1024
_SLASH: Final = ord("/")

Address = tuple[str, int]


def original_destination(sock: socket.socket) -> Address | None:
    """Where the client meant to connect before the REDIRECT; None when it was not redirected."""
    try:
        if sock.family == socket.AF_INET6:
            raw = sock.getsockopt(socket.IPPROTO_IPV6, SO_ORIGINAL_DST, 28)
            port = struct.unpack_from("!H", raw, 2)[0]
            return socket.inet_ntop(socket.AF_INET6, raw[8:24]), port
        raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    except OSError:
        return None
    port, packed = struct.unpack_from("!2xH4s", raw)
    return socket.inet_ntoa(packed), port


class DestinationTable:
    """Which upstream an address:port belongs to, from the upstreams' URLs."""

    def __init__(self, urls: dict[str, str]) -> None:
        self._targets: list[tuple[str, str, int]] = []
        for name, url in urls.items():
            parts = urlsplit(url)
            assert parts.hostname is not None  # validated by the config
            self._targets.append((name, parts.hostname, parts.port or 80))
        self.by_address: dict[Address, str] = {}

    async def resolve(self, loop: asyncio.AbstractEventLoop) -> None:
        """Resolve every upstream host; a name that does not resolve keeps its old addresses."""
        table: dict[Address, str] = {}
        old = {
            name: [a for a, n in self.by_address.items() if n == name] for name, *_ in self._targets
        }
        for name, host, port in self._targets:
            try:
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except OSError as exc:
                log.warning("transparent: cannot resolve %s (%s): %s", host, name, exc)
                for address in old[name]:
                    table.setdefault(address, name)
                continue
            for info in infos:
                address = (str(info[4][0]), port)
                if table.setdefault(address, name) != name:
                    log.warning(
                        "transparent: %s:%d is both %s and %s", *address, table[address], name
                    )
        self.by_address = table

    def lookup(self, address: Address) -> str | None:
        """The upstream name for a destination, or None."""
        return self.by_address.get(address)


class _RouteHandler:
    """Every request of one redirected connection goes to one upstream."""

    def __init__(self, runtime: SidecarRuntime, route: Route) -> None:
        self.runtime = runtime
        self.route = route

    def handle(self, conn: ServerConnection, request: RequestHead) -> Exchange:
        """The app spoke to the upstream itself: keep its path, apply the route."""
        target = request.target
        if not (target and target[0] == _SLASH):  # compiled, native: no slice to compare
            if target[:7].lower() != b"http://":
                return FixedExchange(
                    conn, request, lambda close: error_response(400, "bad request target", close)
                )
            slash = target.find(b"/", 7)
            target = b"/" if slash < 0 else target[slash:]
        return ProxyExchange(self.runtime, conn, request, self.route, target, Direction.OUTBOUND)


class _Peer(asyncio.Protocol):
    """The relay's side towards the original destination."""

    def __init__(self, relay: _Relay) -> None:
        self.relay = relay

    def data_received(self, data: bytes) -> None:
        self.relay.client.write(data)

    def eof_received(self) -> bool:
        if self.relay.client.can_write_eof():
            self.relay.client.write_eof()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.relay.client.close()

    def pause_writing(self) -> None:
        self.relay.client.pause_reading()

    def resume_writing(self) -> None:
        self.relay.client.resume_reading()


class _Relay(asyncio.Protocol):
    """Bytes to and from a destination that is no upstream of ours, untouched."""

    def __init__(self, destination: Address, connect_timeout: float) -> None:
        self.destination = destination
        self.connect_timeout = connect_timeout
        self.client = cast(asyncio.Transport, None)
        self.peer: asyncio.Transport | None = None
        self.pending: list[bytes] = []
        self.client_eof = False
        self._task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.client = cast(asyncio.Transport, transport)
        self._task = asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                transport, _ = await loop.create_connection(lambda: _Peer(self), *self.destination)
        except (OSError, TimeoutError) as exc:
            log.debug("transparent: relay to %s:%d failed: %s", *self.destination, exc)
            self.client.abort()  # the app sees a reset, as it would without the sidecar
            return
        if self.client.is_closing():
            transport.close()
            return
        self.peer = transport
        self.peer.writelines(self.pending)
        self.pending.clear()
        if self.client_eof and self.peer.can_write_eof():
            self.peer.write_eof()
        self.client.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.peer is not None:
            self.peer.write(data)
            return
        self.pending.append(data)
        if sum(map(len, self.pending)) > _RELAY_CHUNK_HIGH:
            self.client.pause_reading()

    def eof_received(self) -> bool:
        self.client_eof = True
        if self.peer is not None and self.peer.can_write_eof():
            self.peer.write_eof()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None:
            self.peer.close()
        elif self._task is not None:
            self._task.cancel()

    def pause_writing(self) -> None:
        if self.peer is not None:
            self.peer.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None:
            self.peer.resume_reading()


class _Acceptor(asyncio.Protocol):
    """Decides, per accepted connection, what it becomes, then hands the transport over."""

    def __init__(self, listener: TransparentListener) -> None:
        self.listener = listener

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        protocol = self.listener.protocol_for(transport)
        if protocol is None:
            sock = transport.get_extra_info("socket")
            if sock is not None:  # linger 0: the close is a reset, as from a closed port
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            cast(asyncio.Transport, transport).abort()
            return
        transport.set_protocol(protocol)
        protocol.connection_made(transport)


class TransparentListener:
    """The `listen.transparent` server and its destination table."""

    def __init__(
        self,
        runtime: SidecarRuntime,
        limits: Limits,
        tracker: ConnectionTracker,
        config: InterceptionConfig,
    ) -> None:
        self.runtime = runtime
        self.limits = limits
        self.tracker = tracker
        self.config = config
        upstreams = runtime.config.upstreams
        self.table = DestinationTable({name: up.url for name, up in upstreams.items()})
        self.handlers = {
            name: _RouteHandler(runtime, route) for name, route in runtime.routes.items()
        }
        self.counts: Counter[str] = Counter()
        self.server: asyncio.Server | None = None
        self._refresher: asyncio.Task[None] | None = None

    async def start(self, address: HostPort) -> asyncio.Server:
        """Resolve the upstreams, bind, and keep the table fresh."""
        loop = asyncio.get_running_loop()
        await self.table.resolve(loop)
        self.server = await loop.create_server(
            lambda: _Acceptor(self), address.host, address.port, reuse_address=True, backlog=1024
        )
        self._refresher = loop.create_task(self._refresh())
        self.runtime.status_sections["transparent"] = self.status
        return self.server

    async def _refresh(self) -> None:
        while True:
            await asyncio.sleep(self.config.resolve_interval)
            await self.table.resolve(asyncio.get_running_loop())

    def protocol_for(self, transport: asyncio.BaseTransport) -> asyncio.Protocol | None:
        """An HTTP connection on an upstream's route, a relay, or None (refuse)."""
        sock = transport.get_extra_info("socket")
        destination = original_destination(sock) if sock is not None else None
        if destination is None or destination == tuple(sock.getsockname()[:2]):
            # Dialled directly, not redirected: there is nowhere to forward it.
            self.counts["refused"] += 1
            return None
        name = self.table.lookup(destination)
        if name is not None:
            self.counts["routed"] += 1
            return ServerConnection(self.handlers[name], self.limits, self.tracker)
        if self.config.unknown_destinations == "refuse" or self.tracker.draining:
            self.counts["refused"] += 1
            return None
        self.counts["relayed"] += 1
        return _Relay(destination, self.config.connect_timeout)

    def status(self) -> dict[str, object]:
        """The /status section: connections by fate and the destinations known."""
        return {
            "connections": {k: self.counts[k] for k in ("routed", "relayed", "refused")},
            "destinations": {f"{h}:{p}": n for (h, p), n in sorted(self.table.by_address.items())},
            "unknown_destinations": self.config.unknown_destinations,
        }

    def close(self) -> None:
        """Stop refreshing (the server is closed with the others)."""
        if self._refresher is not None:
            self._refresher.cancel()
        with contextlib.suppress(Exception):
            if self.server is not None:
                self.server.close()
