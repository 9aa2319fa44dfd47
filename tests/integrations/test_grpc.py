"""gRPC interceptors against a real grpc server on loopback (sync `grpc` and `grpc.aio`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from concurrent import futures

import grpc
import pytest
from grpc import aio
from grpc_status import rpc_status

from cascadebreaker import CircuitBreaker, State
from cascadebreaker.errors import CircuitOpenError
from cascadebreaker.integrations.grpc import (
    AioBreakerInterceptor,
    BreakerInterceptor,
    CircuitOpenRpcError,
)
from cascadebreaker.integrations.grpc_status import (
    parse_rejection,
    rejection_rpc_status,
    rejection_status,
)

from .conftest import FakeClock

SERVICE = "shop.Inventory"
CODES = {name.encode(): code for name, code in grpc.StatusCode.__members__.items()}


class Inventory:
    """Each request names the status code the server answers with (b"OK" answers)."""

    def __init__(self) -> None:
        self.calls = 0

    def _answer(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        self.calls += 1
        if request == b"REFUSED":  # the server's own breaker for its dependency refused
            downstream = CircuitOpenError("ledger", State.OPEN, 3.0, "consecutive_failures")
            context.abort_with_status(rejection_rpc_status(downstream))
        if request != b"OK":
            context.abort(CODES[request], f"told to fail with {request.decode()}")
        return b"stock: 7"

    def unary(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        return self._answer(request, context)

    def stream(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        yield b"first"
        yield self._answer(request, context)

    def collect(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> bytes:
        return self._answer(b"".join(requests), context)

    def chat(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        for request in requests:
            yield self._answer(request, context)


@pytest.fixture
def server() -> Iterator[tuple[str, Inventory]]:
    inventory = Inventory()
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Get": grpc.unary_unary_rpc_method_handler(inventory.unary),
            "Watch": grpc.unary_stream_rpc_method_handler(inventory.stream),
            "Collect": grpc.stream_unary_rpc_method_handler(inventory.collect),
            "Chat": grpc.stream_stream_rpc_method_handler(inventory.chat),
        },
    )
    srv.add_generic_rpc_handlers((handler,))
    port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    yield f"127.0.0.1:{port}", inventory
    srv.stop(grace=None)


def test_failure_codes_open_and_the_rejection_carries_rich_details(
    server: tuple[str, Inventory], clock: FakeClock
) -> None:
    target, inventory = server
    interceptor = BreakerInterceptor(failure_threshold=2, recovery_timeout=9, clock=clock)
    with grpc.intercept_channel(grpc.insecure_channel(target), interceptor) as channel:
        get = channel.unary_unary(f"/{SERVICE}/Get")
        assert get(b"OK") == b"stock: 7"
        for code in (b"UNAVAILABLE", b"DEADLINE_EXCEEDED"):
            with pytest.raises(grpc.RpcError):
                get(code)
        breaker = interceptor.breakers[SERVICE]
        assert breaker.state is State.OPEN
        calls = inventory.calls
        with pytest.raises(grpc.RpcError) as info:
            get(b"OK")
        assert inventory.calls == calls  # never sent
        error = info.value
        assert isinstance(error, CircuitOpenRpcError)
        assert error.code() is grpc.StatusCode.UNAVAILABLE
        status = rpc_status.from_call(error)  # the standard client-side reader
        assert status is not None and len(status.details) == 2
        rejection = parse_rejection(error)
        assert rejection is not None
        assert (rejection.breaker, rejection.state) == (SERVICE, "OPEN")
        assert rejection.retry_after == pytest.approx(9)
        clock.advance(9)
        assert get(b"OK") == b"stock: 7"
        assert breaker.state is State.CLOSED


def test_business_codes_and_resource_exhausted(server: tuple[str, Inventory]) -> None:
    target, _ = server
    interceptor = BreakerInterceptor(failure_threshold=1)
    with grpc.intercept_channel(grpc.insecure_channel(target), interceptor) as channel:
        get = channel.unary_unary(f"/{SERVICE}/Get")
        for code in (b"NOT_FOUND", b"INVALID_ARGUMENT", b"FAILED_PRECONDITION", b"ALREADY_EXISTS"):
            with pytest.raises(grpc.RpcError):
                get(code)
        assert interceptor.breakers[SERVICE].state is State.CLOSED
        with pytest.raises(grpc.RpcError):
            get(b"RESOURCE_EXHAUSTED")
        assert interceptor.breakers[SERVICE].state is State.OPEN


def test_streaming_shapes_record_when_the_stream_ends(server: tuple[str, Inventory]) -> None:
    target, _ = server
    breaker = CircuitBreaker("inventory", failure_threshold=3)
    interceptor = BreakerInterceptor(breaker=breaker)
    with grpc.intercept_channel(grpc.insecure_channel(target), interceptor) as channel:
        watch = channel.unary_stream(f"/{SERVICE}/Watch")
        collect = channel.stream_unary(f"/{SERVICE}/Collect")
        chat = channel.stream_stream(f"/{SERVICE}/Chat")
        assert list(watch(b"OK")) == [b"first", b"stock: 7"]
        assert collect(iter([b"O", b"K"])) == b"stock: 7"
        assert list(chat(iter([b"OK", b"OK"]))) == [b"stock: 7", b"stock: 7"]
        with pytest.raises(grpc.RpcError):
            list(watch(b"UNAVAILABLE"))
        with pytest.raises(grpc.RpcError):
            collect(iter([b"UNAVAIL", b"ABLE"]))
        with pytest.raises(grpc.RpcError):
            list(chat(iter([b"OK", b"UNAVAILABLE"])))
        assert breaker.state is State.OPEN
        with pytest.raises(CircuitOpenRpcError):
            list(watch(b"OK"))
    assert breaker.snapshot()["calls"] == {
        "success": 3,
        "failure": 3,
        "ignored": 0,
        "rejected": 1,
    }


async def test_aio_interceptors(server: tuple[str, Inventory], clock: FakeClock) -> None:
    target, inventory = server
    interceptors = AioBreakerInterceptor.all(failure_threshold=2, recovery_timeout=4, clock=clock)
    async with aio.insecure_channel(target, interceptors=interceptors) as channel:
        get = channel.unary_unary(f"/{SERVICE}/Get")
        assert await get(b"OK") == b"stock: 7"
        with pytest.raises(aio.AioRpcError):
            await get(b"NOT_FOUND")
        watch = channel.unary_stream(f"/{SERVICE}/Watch")
        assert [r async for r in watch(b"OK")] == [b"first", b"stock: 7"]
        with pytest.raises(aio.AioRpcError):
            [r async for r in watch(b"UNAVAILABLE")]
        collect = channel.stream_unary(f"/{SERVICE}/Collect")

        async def parts() -> AsyncIterator[bytes]:
            yield b"DEADLINE_"
            yield b"EXCEEDED"

        with pytest.raises(aio.AioRpcError):
            await collect(parts())
        calls = inventory.calls
        with pytest.raises(aio.AioRpcError) as info:
            await get(b"OK")
        assert inventory.calls == calls
        assert info.value.code() is grpc.StatusCode.UNAVAILABLE
        rejection = parse_rejection(info.value)
        assert rejection is not None and rejection.retry_after == pytest.approx(4)
        chat = channel.stream_stream(f"/{SERVICE}/Chat")
        with pytest.raises(aio.AioRpcError):
            [r async for r in chat(parts())]
        clock.advance(4)

        async def ok() -> AsyncIterator[bytes]:
            yield b"OK"

        assert [r async for r in chat(ok())] == [b"stock: 7"]


def test_a_relayed_refusal_is_not_the_servers_failure(server: tuple[str, Inventory]) -> None:
    target, _ = server
    interceptor = BreakerInterceptor(failure_threshold=1)
    with grpc.intercept_channel(grpc.insecure_channel(target), interceptor) as channel:
        get = channel.unary_unary(f"/{SERVICE}/Get")
        watch = channel.unary_stream(f"/{SERVICE}/Watch")
        for _ in range(3):
            with pytest.raises(grpc.RpcError) as info:
                get(b"REFUSED")
            assert info.value.code() is grpc.StatusCode.UNAVAILABLE
            with pytest.raises(grpc.RpcError):
                list(watch(b"REFUSED"))
        breaker = interceptor.breakers[SERVICE]
        assert breaker.state is State.CLOSED
        assert breaker.snapshot()["calls"]["ignored"] == 6
        with pytest.raises(grpc.RpcError):
            get(b"UNAVAILABLE")  # a plain UNAVAILABLE still counts
        assert breaker.state is State.OPEN


async def test_aio_a_relayed_refusal_is_not_the_servers_failure(
    server: tuple[str, Inventory],
) -> None:
    target, _ = server
    breaker = CircuitBreaker("inventory", failure_threshold=1)
    interceptors = AioBreakerInterceptor.all(breaker=breaker)
    async with aio.insecure_channel(target, interceptors=interceptors) as channel:
        get = channel.unary_unary(f"/{SERVICE}/Get")
        for _ in range(3):
            with pytest.raises(aio.AioRpcError):
                await get(b"REFUSED")
        for _ in range(500):  # outcomes are settled in a task once each call is done
            if breaker.snapshot()["calls"]["ignored"] == 3:
                break
            await asyncio.sleep(0.01)
        assert breaker.snapshot()["calls"]["ignored"] == 3
        assert breaker.state is State.CLOSED


def test_forced_open_promises_no_retry_delay() -> None:
    breaker = CircuitBreaker("inventory")
    breaker.force_open()
    try:
        breaker.acquire()
    except Exception as exc:
        status = rejection_status(exc)  # type: ignore[arg-type]
    assert status.code == grpc.StatusCode.UNAVAILABLE.value[0]
    assert len(status.details) == 1  # ErrorInfo only: no RetryInfo for "until reset"


def test_invalid_failure_codes() -> None:
    with pytest.raises(ValueError, match="failure_codes"):
        BreakerInterceptor(failure_codes=[14])  # type: ignore[list-item]
