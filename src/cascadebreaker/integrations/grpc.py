"""gRPC client interceptors for `grpc` and `grpc.aio`: a breaker per service (the `grpc` extra).

    channel = grpc.intercept_channel(grpc.insecure_channel(target), BreakerInterceptor())
    aio_channel = grpc.aio.insecure_channel(target, interceptors=AioBreakerInterceptor.all())

What counts: a call ending in UNAVAILABLE, DEADLINE_EXCEEDED or RESOURCE_EXHAUSTED
(`failure_codes=`) is a failure; CANCELLED is the caller's (ignored); OK and every business
code (NOT_FOUND, INVALID_ARGUMENT, FAILED_PRECONDITION, ...) is a success: the server answered.
A stream's outcome is recorded when it ends. An UNAVAILABLE that carries our refusal (the rich
error below, relayed by a server whose own breaker refused, or a sidecar's `ccb-rejection-bin`)
is not the server's failure: the permit is given back unrecorded (`grpc_status.is_refusal`).

A rejected call never reaches the channel: it raises a `grpc.RpcError` (for aio, a
`grpc.aio.AioRpcError`) with code UNAVAILABLE and the standard rich details in
`grpc-status-details-bin` (see `grpc_status`), chained from the `CircuitOpenError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

import grpc
from grpc import aio

from ..breaker import CircuitBreaker
from ..errors import CircuitOpenError
from ..permit import Permit
from ..stores.base import Store
from .grpc_status import is_refusal as _is_refusal
from .grpc_status import rejection_rpc_status as _rejection_rpc_status
from .routing import BreakerFactory, BreakerRouter

__all__ = [
    "FAILURE_CODES",
    "AioBreakerInterceptor",
    "BreakerInterceptor",
    "CircuitOpenRpcError",
    "service_key",
]

FAILURE_CODES: frozenset[grpc.StatusCode] = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)
MethodKey = Callable[[str], str]


def service_key(method: str) -> str:
    """Default breaker key: the service of a full method name (`/pkg.Service/Method`)."""
    return method.lstrip("/").split("/", 1)[0] or method


class CircuitOpenRpcError(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    """The sync interceptor's rejection: an RpcError with the rich status in its trailers."""

    def __init__(self, rejection: CircuitOpenError) -> None:
        self.rejection = rejection
        self._status = _rejection_rpc_status(rejection)
        super().__init__(self._status.details)

    def code(self) -> grpc.StatusCode:
        """UNAVAILABLE."""
        return self._status.code

    def details(self) -> str:
        """The rejection's message."""
        return str(self._status.details)

    def trailing_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        """`grpc-status-details-bin`: the serialized google.rpc.Status."""
        return tuple(self._status.trailing_metadata)

    def initial_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        """None sent: the call never started."""
        return ()

    def is_active(self) -> bool:
        """False: the call is over before it began."""
        return False

    def time_remaining(self) -> float | None:
        """No deadline applies to a call that never ran."""
        return None

    def cancel(self) -> bool:
        """Nothing to cancel."""
        return False

    def add_callback(self, callback: Callable[[], None]) -> bool:
        """The call is already over: the callback is not registered."""
        return False


class _Classifier:
    """Routes a method to its breaker and records a call's final status code."""

    def __init__(
        self,
        key: MethodKey | None,
        breaker: CircuitBreaker | None,
        breaker_factory: BreakerFactory | None,
        store: Store | None,
        failure_codes: Collection[grpc.StatusCode],
        on_new_breaker: Callable[[CircuitBreaker], None] | None,
        breaker_settings: Mapping[str, Any],
    ) -> None:
        if not all(isinstance(c, grpc.StatusCode) for c in failure_codes):
            raise ValueError(f"failure_codes must be grpc.StatusCode values: {failure_codes!r}")
        self.failure_codes = frozenset(failure_codes)
        self.router: BreakerRouter[str] = BreakerRouter(
            key=key or service_key,
            custom_key=key is not None,
            breaker=breaker,
            breaker_factory=breaker_factory,
            store=store,
            breaker_settings=breaker_settings,
            failure_statuses=(),
            failure_exceptions=(),
            on_new_breaker=on_new_breaker,
        )

    def settle(self, permit: Permit, code: grpc.StatusCode | None, trailers: Any = None) -> None:
        if code is grpc.StatusCode.UNAVAILABLE and _is_refusal(trailers):
            permit.ignore()  # refused downstream: the server is healthy
        elif code in self.failure_codes:
            permit.failure()
        elif code is grpc.StatusCode.CANCELLED or code is None:
            permit.ignore()
        else:
            permit.success()


class _SettlingStream:
    """A response stream that records its outcome when the reader reaches its end or error.

    grpc runs done callbacks on its own thread, possibly after the reader has seen the end; this
    records in the reader's thread first (a permit ignores the second record). Everything else
    is the underlying call's.
    """

    def __init__(self, call: Any, permit: Permit, calls: _Classifier) -> None:
        self._call = call
        self._permit = permit
        self._calls = calls

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        try:
            return next(self._call)
        except StopIteration:
            self._calls.settle(self._permit, self._call.code())
            raise
        except grpc.RpcError as error:
            self._calls.settle(self._permit, error.code(), _trailers(error))
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._call, name)


def _trailers(call: Any) -> Any:
    """A finished sync call's trailing metadata (None when it has none to give)."""
    try:
        return call.trailing_metadata()
    except Exception:
        return None


def _method(details: grpc.ClientCallDetails) -> str:
    method = details.method
    return method.decode() if isinstance(method, bytes) else str(method)


class BreakerInterceptor(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
    grpc.StreamUnaryClientInterceptor,  # type: ignore[misc]
    grpc.StreamStreamClientInterceptor,  # type: ignore[misc]
):
    """A sync client interceptor for all four call shapes (`grpc.intercept_channel`)."""

    def __init__(
        self,
        *,
        key: MethodKey | None = None,
        breaker: CircuitBreaker | None = None,
        breaker_factory: BreakerFactory | None = None,
        store: Store | None = None,
        failure_codes: Collection[grpc.StatusCode] = FAILURE_CODES,
        on_new_breaker: Callable[[CircuitBreaker], None] | None = None,
        **breaker_settings: Any,
    ) -> None:
        self._calls = _Classifier(
            key, breaker, breaker_factory, store, failure_codes, on_new_breaker, breaker_settings
        )

    @property
    def breakers(self) -> dict[str, CircuitBreaker]:
        """The breakers created so far, by key."""
        return self._calls.router.breakers

    def _guarded(
        self, details: grpc.ClientCallDetails, start: Callable[[], Any], streaming: bool = False
    ) -> Any:
        try:
            permit = self._calls.router.breaker_for(_method(details)).acquire()
        except CircuitOpenError as rejection:
            raise CircuitOpenRpcError(rejection) from rejection
        try:
            call = start()
        except BaseException:
            permit.ignore()
            raise
        # Fires once the call is over (at once for a finished blocking call); for a stream that
        # is read to its end, _SettlingStream records first, in the reader's thread.
        call.add_done_callback(
            lambda done: self._calls.settle(permit, done.code(), _trailers(done))
        )
        return _SettlingStream(call, permit, self._calls) if streaming else call

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        """One request, one response."""
        return self._guarded(details, lambda: continuation(details, request))

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        """One request, a response stream (recorded when it ends)."""
        return self._guarded(details, lambda: continuation(details, request), streaming=True)

    def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        """A request stream, one response."""
        return self._guarded(details, lambda: continuation(details, requests))

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        """Streams both ways (recorded when the response stream ends)."""
        return self._guarded(details, lambda: continuation(details, requests), streaming=True)


def _aio_rejection(rejection: CircuitOpenError) -> aio.AioRpcError:
    status = _rejection_rpc_status(rejection)
    return aio.AioRpcError(
        status.code,
        aio.Metadata(),
        aio.Metadata(*status.trailing_metadata),
        details=status.details,
    )


class _RejectedStreamCall(aio.UnaryStreamCall, aio.StreamStreamCall):  # type: ignore[misc]
    """A streaming call that never started: reading it raises the rejection.

    grpc.aio cannot take an exception from a streaming interceptor (nor an iterator returned
    before the continuation ran), so a rejected stream is a finished call object instead.
    """

    def __init__(self, error: aio.AioRpcError) -> None:
        self._error = error

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._raise()

    async def _raise(self) -> AsyncIterator[Any]:
        raise self._error
        yield  # pragma: no cover (makes this an async generator)

    async def read(self) -> Any:
        raise self._error

    async def write(self, request: Any) -> None:
        raise self._error

    async def done_writing(self) -> None:
        return None

    def cancel(self) -> bool:
        return False

    def cancelled(self) -> bool:
        return False

    def done(self) -> bool:
        return True

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        callback(self)

    def time_remaining(self) -> float | None:
        return None

    async def initial_metadata(self) -> aio.Metadata:
        return self._error.initial_metadata()

    async def trailing_metadata(self) -> aio.Metadata:
        return self._error.trailing_metadata()

    async def code(self) -> grpc.StatusCode:
        return self._error.code()

    async def details(self) -> str:
        return str(self._error.details())

    async def wait_for_connection(self) -> None:
        return None


class _AioGuard:
    """What the four aio interceptors share: one classifier, one way to start a call."""

    def __init__(self, calls: _Classifier) -> None:
        self.calls = calls
        self._settling: set[asyncio.Task[None]] = set()  # strong refs until each task ends

    def permit(self, details: aio.ClientCallDetails) -> Permit | aio.AioRpcError:
        # The slot's async admission is for shared stores off the closed path; a gRPC
        # interceptor decides synchronously, as the sync interceptor does.
        try:
            return self.calls.router.breaker_for(_method(details)).acquire()
        except CircuitOpenError as rejection:
            error = _aio_rejection(rejection)
            error.__cause__ = rejection
            return error

    async def start(self, permit: Permit, start: Callable[[], Any]) -> Any:
        try:
            call = await start()
        except BaseException:
            permit.ignore()
            raise
        loop = asyncio.get_running_loop()

        def finished(done: Any) -> None:
            # aio's code() is a coroutine; the call is over, so it answers at once.
            task = loop.create_task(self._settle(permit, done))
            self._settling.add(task)
            task.add_done_callback(self._settling.discard)

        call.add_done_callback(finished)
        return call

    async def _settle(self, permit: Permit, call: Any) -> None:
        trailers = None
        try:
            code = await call.code()
            if code is grpc.StatusCode.UNAVAILABLE:
                trailers = await call.trailing_metadata()
        except BaseException:  # a cancelled call may not report a code
            code = None
        self.calls.settle(permit, code, trailers)


class AioBreakerInterceptor:
    """The `grpc.aio` interceptors: `AioBreakerInterceptor.all(...)` gives one per call shape.

    grpc.aio picks interceptors by base class, so each shape is its own object; they share
    one set of breakers. Calls come back as grpc.aio's own call objects; a rejected unary
    call raises an `AioRpcError`, a rejected stream raises it on the first read.
    """

    @staticmethod
    def all(
        *,
        key: MethodKey | None = None,
        breaker: CircuitBreaker | None = None,
        breaker_factory: BreakerFactory | None = None,
        store: Store | None = None,
        failure_codes: Collection[grpc.StatusCode] = FAILURE_CODES,
        on_new_breaker: Callable[[CircuitBreaker], None] | None = None,
        **breaker_settings: Any,
    ) -> Sequence[aio.ClientInterceptor]:
        """The four interceptors for `grpc.aio.insecure_channel(..., interceptors=...)`."""
        guard = _AioGuard(
            _Classifier(
                key,
                breaker,
                breaker_factory,
                store,
                failure_codes,
                on_new_breaker,
                breaker_settings,
            )
        )
        return [
            _AioUnaryUnary(guard),
            _AioUnaryStream(guard),
            _AioStreamUnary(guard),
            _AioStreamStream(guard),
        ]


class _AioUnaryUnary(aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    def __init__(self, guard: _AioGuard) -> None:
        self.guard = guard

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        permit = self.guard.permit(details)
        if isinstance(permit, aio.AioRpcError):
            raise permit
        return await self.guard.start(permit, lambda: continuation(details, request))


class _AioUnaryStream(aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    def __init__(self, guard: _AioGuard) -> None:
        self.guard = guard

    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        permit = self.guard.permit(details)
        if isinstance(permit, aio.AioRpcError):
            return _RejectedStreamCall(permit)
        return await self.guard.start(permit, lambda: continuation(details, request))


class _AioStreamUnary(aio.StreamUnaryClientInterceptor):  # type: ignore[misc]
    def __init__(self, guard: _AioGuard) -> None:
        self.guard = guard

    async def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        permit = self.guard.permit(details)
        if isinstance(permit, aio.AioRpcError):
            raise permit
        return await self.guard.start(permit, lambda: continuation(details, requests))


class _AioStreamStream(aio.StreamStreamClientInterceptor):  # type: ignore[misc]
    def __init__(self, guard: _AioGuard) -> None:
        self.guard = guard

    async def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        permit = self.guard.permit(details)
        if isinstance(permit, aio.AioRpcError):
            return _RejectedStreamCall(permit)
        return await self.guard.start(permit, lambda: continuation(details, requests))
