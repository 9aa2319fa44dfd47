"""The floor of the gRPC path: a grpc.aio server whose `Call` answers at once, without I/O.

    python bench/sidecar/grpc_floor.py PORT

Same generated code, same server options and event loop (uvloop when installed) as the sidecar's
gRPC listener; the difference between this and the sidecar's `Call` is the sidecar's own work.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import grpc

from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2 as pb
from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2_grpc

_BODY = b"hello, world\n"


class EmptySidecar:
    """Answers every Call with a fixed 200; Check and Watch are not used."""

    async def Call(self, request: Any, context: Any) -> Any:
        """A fixed response, no upstream."""
        return pb.CallResponse(status=200, body=_BODY)

    Check = Watch = Call


async def serve(port: int) -> None:
    """Serve until killed."""
    server = grpc.aio.server(options=(("grpc.so_reuseport", 0),))
    sidecar_pb2_grpc.add_SidecarServicer_to_server(  # type: ignore[no-untyped-call]
        EmptySidecar(), server
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(int(sys.argv[1])))
    else:
        uvloop.run(serve(int(sys.argv[1])))
