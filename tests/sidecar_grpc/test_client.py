"""The Python client (`grpc_client`): typed refusals, Check, and the Watch subscriber."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from cascadebreaker.cascade.endpoints import Endpoint
from cascadebreaker.cascade.updates import AvailabilityUpdate
from cascadebreaker.sidecar.grpc.api import start_grpc_server
from cascadebreaker.sidecar.grpc.client import CallRefused, SidecarClient, watch_updates
from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2 as pb
from cascadebreaker.sidecar.proxy.ports import WatchSubscription
from cascadebreaker.sidecar.server import build_runtime

from .conftest import GrpcSidecar, free_port, sidecar_config


async def test_call_then_refusal_as_a_typed_error(grpc_sidecar: GrpcSidecar) -> None:
    """Responses of any status come back; an open breaker raises CallRefused with its facts."""
    async with SidecarClient(f"127.0.0.1:{grpc_sidecar.server.port}") as client:
        reply = await client.call("payment", "PUT", "/v1/x", [("x-a", "1")], b"body")
        assert reply.status == 200
        for _ in range(2):
            assert (await client.call("payment", path="/status/502")).status == 502
        with pytest.raises(CallRefused) as refused:
            await client.call("payment", path="/")
        assert refused.value.rejection.circuit_state == pb.CIRCUIT_STATE_OPEN
        assert refused.value.rejection.upstream == "payment"
        check = await client.check("payment")
        assert not check.available


async def test_other_errors_stay_grpc_errors(grpc_sidecar: GrpcSidecar) -> None:
    """NOT_FOUND and an unreachable upstream are not refusals."""
    async with SidecarClient(f"127.0.0.1:{grpc_sidecar.server.port}") as client:
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await client.call("nope")
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await client.call("refused", deadline=20)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_watch_updates_yields_cascade_updates_and_skips_malformed(
    upstream_server: str,
) -> None:
    """A malformed message (a route without '/') is reported and skipped; the rest arrive."""
    charges = Endpoint("payment", "POST", "/v1/charges")
    expires = round(time.time() + 60, 3)  # the wire carries milliseconds
    good = AvailabilityUpdate("payment", charges, True, (), expires, version=2)
    bad = AvailabilityUpdate(
        "payment", Endpoint("payment", "GET", "no-slash"), True, (), time.time() + 60, version=1
    )

    async def source(subscription: WatchSubscription) -> AsyncIterator[AvailabilityUpdate]:
        yield bad
        yield good
        await asyncio.Event().wait()

    config = sidecar_config(upstream_server, free_port())
    runtime = build_runtime(config)
    server = await start_grpc_server(config, runtime, update_source=source)
    assert server is not None
    malformed: list[tuple[Any, Exception]] = []
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        stream = watch_updates(
            channel, "checkout", on_malformed=lambda m, e: malformed.append((m, e))
        )
        received = await anext(stream)
        await stream.aclose()
    finally:
        await channel.close()
        await server.stop(None)
        runtime.close()
    assert received == good
    assert len(malformed) == 1
    assert malformed[0][0].endpoint == "GET no-slash"
