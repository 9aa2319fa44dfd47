"""The floor of the gRPC path: a grpc.aio server whose `Call` answers at once, without I/O.

    python bench/sidecar/grpc_floor.py PORT [UPSTREAM_PORT]

Same generated code, same server options and event loop (uvloop when installed) as the sidecar's
gRPC listener; the difference between this and the sidecar's `Call` is the sidecar's own work.

With UPSTREAM_PORT, `Call` also makes the upstream call the sidecar makes, with nothing else: a
bare `GET /` on one keep-alive connection, the response read until its fixed body (no parsing,
no pipeline): what any gRPC-to-HTTP bridge pays for the hop itself.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import grpc

from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2 as pb
from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2_grpc

_BODY = b"hello, world\n"
_REQUEST = b"GET / HTTP/1.1\r\nhost: bench\r\n\r\n"


class EmptySidecar:
    """Answers every Call with a fixed 200; Check and Watch are not used."""

    async def Call(self, request: Any, context: Any) -> Any:
        """A fixed response, no upstream."""
        return pb.CallResponse(status=200, body=_BODY)

    Check = Watch = Call


class BareUpstream(asyncio.Protocol):
    """One keep-alive connection to the upstream; a response ends with the fixed body."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.received = b""
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True  # e.g. the upstream's keep-alive timeout between the bench's phases
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("upstream closed the connection"))

    def data_received(self, data: bytes) -> None:
        self.received += data
        if self.received.endswith(_BODY) and self.waiter is not None:
            self.received = b""
            self.waiter.set_result(None)

    async def get(self) -> None:
        """Send `GET /` and wait for the whole response."""
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(_REQUEST)
        await self.waiter


class FetchingSidecar(EmptySidecar):
    """Answers every Call after a bare upstream GET, on an idle keep-alive connection (a new
    one when none is idle: concurrent calls never share one)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.idle: list[BareUpstream] = []

    async def Call(self, request: Any, context: Any) -> Any:
        """The fixed response, after the upstream's."""
        while self.idle and self.idle[-1].closed:
            self.idle.pop()
        if self.idle:
            connection = self.idle.pop()
        else:
            loop = asyncio.get_running_loop()
            _, connection = await loop.create_connection(
                BareUpstream, "127.0.0.1", self.upstream_port
            )
        await connection.get()
        self.idle.append(connection)
        return pb.CallResponse(status=200, body=_BODY)


async def serve(port: int, upstream_port: int | None = None) -> None:
    """Serve until killed."""
    servicer: EmptySidecar = EmptySidecar()
    if upstream_port is not None:
        servicer = FetchingSidecar(upstream_port)
    server = grpc.aio.server(options=(("grpc.so_reuseport", 0),))
    sidecar_pb2_grpc.add_SidecarServicer_to_server(  # type: ignore[no-untyped-call]
        servicer, server
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    arguments = [int(a) for a in sys.argv[1:3]]
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(*arguments))
    else:
        uvloop.run(serve(*arguments))
