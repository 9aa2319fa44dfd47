"""Watch streams and the cascade seams of Check, through a real grpcio client."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import grpc
import pytest

from cascadebreaker.cascade.availability import AvailabilityTable
from cascadebreaker.cascade.endpoints import Endpoint
from cascadebreaker.cascade.graph import DependencyGraph
from cascadebreaker.cascade.updates import (
    AvailabilityUpdate,
    Cause,
    Verdict,
    sign,
    verify_signature,
)
from cascadebreaker.sidecar.grpc.api import start_grpc_server
from cascadebreaker.sidecar.grpc.messages import (
    REJECTION_METADATA,
    update_from_proto,
    update_to_proto,
)
from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2 as pb
from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2_grpc
from cascadebreaker.sidecar.proxy.ports import (
    AvailabilityView,
    UpdateSource,
    WatchSubscription,
    no_updates,
)
from cascadebreaker.sidecar.proxy.runtime import SidecarRuntime
from cascadebreaker.sidecar.server import build_runtime

from .conftest import GrpcSidecar, free_port, sidecar_config

SECRET = b"test-secret"
LEDGER = Endpoint("ledger", "POST", "/v1/entries")
CHARGES = Endpoint("payment", "POST", "/v1/charges")


def _unavailable_charges(version: int, expires_in: float = 30.0) -> AvailabilityUpdate:
    """payment POST /v1/charges is down because ledger's breaker opened."""
    return AvailabilityUpdate(
        service="payment",
        endpoint=CHARGES,
        available=False,
        cause_chain=(Cause(LEDGER, "circuit open"), Cause(CHARGES, "requires ledger")),
        expires_at=time.time() + expires_in,
        version=version,
    )


async def _serve(
    upstream_url: str,
    availability: AvailabilityView | None = None,
    update_source: UpdateSource = no_updates,
) -> tuple[Any, Any, Any, SidecarRuntime]:
    config = sidecar_config(upstream_url, free_port())
    runtime = build_runtime(config)
    server = await start_grpc_server(
        config, runtime, availability=availability, update_source=update_source
    )
    assert server is not None
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    return server, channel, sidecar_pb2_grpc.SidecarStub(channel), runtime


async def _close(server: Any, channel: Any, runtime: SidecarRuntime) -> None:
    await channel.close()
    await server.stop(None)
    runtime.close()


async def _drain(stream: Any, into: list[Any]) -> None:
    async for update in stream:
        into.append(update)


async def test_default_watch_stays_open_and_silent(upstream_server: str) -> None:
    """With no cascade plugged in, Watch sends nothing and ends only when the caller stops."""
    server, channel, stub, runtime = await _serve(upstream_server)
    try:
        stream = stub.Watch(pb.WatchRequest(subscriber_service="gateway"), timeout=0.5)
        received: list[Any] = []
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _drain(stream, received)
        assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert received == []
    finally:
        await _close(server, channel, runtime)


async def test_watch_streams_signed_updates_from_the_source(upstream_server: str) -> None:
    """Updates arrive in order; the signature verifies after the protobuf round trip."""
    subscriptions: list[WatchSubscription] = []
    down = sign(_unavailable_charges(version=7), SECRET)
    up = sign(AvailabilityUpdate("payment", CHARGES, True, (), time.time() + 60, version=8), SECRET)

    async def source(subscription: WatchSubscription) -> AsyncIterator[AvailabilityUpdate]:
        subscriptions.append(subscription)
        yield down
        yield up
        await asyncio.Event().wait()

    server, channel, stub, runtime = await _serve(upstream_server, update_source=source)
    try:
        stream = stub.Watch(
            pb.WatchRequest(
                subscriber_service="checkout", endpoints=["POST /v1/charges"], since_version=6
            )
        )
        first = await stream.read()
        second = await stream.read()
        stream.cancel()
    finally:
        await _close(server, channel, runtime)
    assert [first.version, second.version] == [7, 8]
    assert first.service == "payment"
    assert first.endpoint == "POST /v1/charges"
    assert not first.available
    assert [(c.service, c.endpoint) for c in first.cause_chain] == [
        ("ledger", "POST /v1/entries"),
        ("payment", "POST /v1/charges"),
    ]
    assert len(first.signature) == 32
    for message, original in ((first, down), (second, up)):
        decoded = update_from_proto(message)
        assert decoded == original
        assert verify_signature(decoded, SECRET) is Verdict.ACCEPTED
    assert verify_signature(update_from_proto(first), b"other secret") is Verdict.BAD_SIGNATURE
    (subscription,) = subscriptions
    assert subscription.subscriber_service == "checkout"
    assert subscription.endpoints == ("POST /v1/charges",)
    assert subscription.since_version == 6
    assert subscription.peer


async def test_watch_rejects_a_malformed_endpoint_filter(upstream_server: str) -> None:
    """Filters must be `METHOD /route`."""
    server, channel, stub, runtime = await _serve(upstream_server)
    try:
        stream = stub.Watch(pb.WatchRequest(subscriber_service="x", endpoints=["charges"]))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stream.read()
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        await _close(server, channel, runtime)


def test_update_round_trip_keeps_service_wide_endpoints() -> None:
    """`* *` (a whole service) survives the protobuf form."""
    whole = Endpoint.service_wide("ledger")
    update = AvailabilityUpdate(
        "payment",
        CHARGES,
        False,
        (Cause(whole, "circuit open"), Cause(CHARGES, "requires ledger")),
        expires_at=1_900_000_000.123,
        version=3,
    )
    assert update_from_proto(update_to_proto(update)) == update


async def test_check_reports_the_cascade_cause_chain(upstream_server: str) -> None:
    """A received unavailability makes Check say no, with the chain, while the breaker is closed."""
    table = AvailabilityTable(
        "checkout", DependencyGraph(time.monotonic), clock=time.monotonic, wall_clock=time.time
    )
    assert table.receive(_unavailable_charges(version=1)).verdict is Verdict.ACCEPTED
    server, channel, stub, runtime = await _serve(upstream_server, availability=table)
    try:
        down = await stub.Check(pb.CheckRequest(upstream="payment", endpoint="POST /v1/charges"))
        other = await stub.Check(pb.CheckRequest(upstream="payment", endpoint="GET /v1/charges"))
    finally:
        await _close(server, channel, runtime)
    assert not down.available
    assert down.circuit_state == pb.CIRCUIT_STATE_CLOSED
    assert 20_000 < down.retry_after_ms <= 30_000
    assert [(c.service, c.endpoint, c.reason) for c in down.cause_chain] == [
        ("ledger", "POST /v1/entries", "circuit open"),
        ("payment", "POST /v1/charges", "requires ledger"),
    ]
    assert other.available
    assert list(other.cause_chain) == []


async def test_check_reports_the_available_fraction_of_replicas(upstream_server: str) -> None:
    """One of two payment replicas reports the endpoint unavailable: Check says available,
    with half of the live instances able to serve it; nothing known means a fraction of 1."""
    table = AvailabilityTable(
        "checkout", DependencyGraph(time.monotonic), clock=time.monotonic, wall_clock=time.time
    )
    sick = replace(_unavailable_charges(version=1), instance="payment-1")
    healthy = AvailabilityUpdate(
        "payment", sick.endpoint, True, (), time.time() + 30, 1, instance="payment-2"
    )
    assert table.receive(sick).verdict is Verdict.ACCEPTED
    assert table.receive(healthy).verdict is Verdict.ACCEPTED
    server, channel, stub, runtime = await _serve(upstream_server, availability=table)
    try:
        partial = await stub.Check(pb.CheckRequest(upstream="payment", endpoint="POST /v1/charges"))
        unknown = await stub.Check(pb.CheckRequest(upstream="payment", endpoint="GET /v1/charges"))
    finally:
        await _close(server, channel, runtime)
    assert partial.available
    assert (partial.available_fraction, partial.live_instances) == (0.5, 2)
    assert list(partial.cause_chain) == []
    assert (unknown.available, unknown.available_fraction, unknown.live_instances) == (True, 1.0, 0)


async def test_real_cascade_refuses_a_doomed_call(grpc_sidecar: GrpcSidecar) -> None:
    """With the sidecar's own cascade told that payment's endpoint is down, Call is refused
    before any upstream is touched, Check agrees, and other endpoints still work."""
    table = grpc_sidecar.runtime.availability  # type: ignore[attr-defined]
    assert table.receive(_unavailable_charges(version=1)).verdict is Verdict.ACCEPTED
    stub = grpc_sidecar.stub
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Call(pb.CallRequest(upstream="payment", method="POST", path="/v1/charges"))
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    trailers = dict(caught.value.trailing_metadata() or ())
    rejection = pb.Rejection.FromString(trailers[REJECTION_METADATA])
    assert rejection.reason == "cascade"
    assert [(c.service, c.endpoint) for c in rejection.cause_chain] == [
        ("ledger", "POST /v1/entries"),
        ("payment", "POST /v1/charges"),
    ]
    assert rejection.retry_after_ms > 0
    check = await stub.Check(pb.CheckRequest(upstream="payment", endpoint="POST /v1/charges"))
    assert not check.available
    ok = await stub.Call(pb.CallRequest(upstream="payment", method="GET", path="/v1/charges"))
    assert ok.status == 200
    assert grpc_sidecar.runtime.routes["payment"].stats.outcomes["success"] == 1
