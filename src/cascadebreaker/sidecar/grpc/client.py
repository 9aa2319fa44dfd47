"""A Python client of the sidecar's gRPC API: typed errors for refusals, and a Watch subscriber.

Apps in other languages generate their own client from `proto/ccb/v1/sidecar.proto`; this one
is for Python apps and for sidecars subscribing to each other's `Watch` streams::

    async with SidecarClient("127.0.0.1:15002") as sidecar:
        try:
            reply = await sidecar.call("payment", "POST", "/v1/charges", body=b"{}")
        except CallRefused as refused:       # open breaker or cascade: no call was made
            refused.rejection.retry_after_ms, refused.rejection.cause_chain

Over TLS (a sidecar with `grpc_tls:`), with a client certificate when it requires mutual TLS::

    tls = ClientTls(ca="ca.pem", cert="app.pem", key="app-key.pem")
    async with SidecarClient("sidecar.internal:15002", tls=tls) as sidecar: ...
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc

from cascadebreaker.cascade.updates import AvailabilityUpdate
from cascadebreaker.sidecar.grpc.messages import REJECTION_METADATA, BadArgument, update_from_proto
from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2 as pb
from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2_grpc as pb_grpc
from cascadebreaker.sidecar.grpc.tls import channel_credentials, channel_options, read_material

__all__ = ["CallRefused", "ClientTls", "SidecarClient", "watch_updates"]

log = logging.getLogger("cascadebreaker.sidecar.grpc")


class CallRefused(Exception):
    """The sidecar refused the call without making it (`rejection` says why and for how long)."""

    def __init__(self, rejection: Any, details: str) -> None:
        super().__init__(details)
        self.rejection = rejection


def rejection_of(error: grpc.aio.AioRpcError) -> Any | None:
    """The `Rejection` carried by an UNAVAILABLE error, or None (the call itself failed)."""
    if error.code() != grpc.StatusCode.UNAVAILABLE:
        return None
    for key, value in error.trailing_metadata() or ():
        if key == REJECTION_METADATA:
            return pb.Rejection.FromString(value)
    return None


@dataclass(frozen=True, slots=True)
class ClientTls:
    """TLS to a sidecar: verify it against `ca` (default: the system's roots); show `cert` and
    `key` (PEM files) when it requires mutual TLS; `server_name` is the name its certificate
    must carry when that is not the host dialled."""

    ca: str | Path | None = None
    cert: str | Path | None = None
    key: str | Path | None = None
    server_name: str | None = None

    def channel(self, address: str) -> grpc.aio.Channel:
        """A TLS channel to `address` (the files are read now; errors name the field)."""
        material = read_material(self.cert, self.key, self.ca, prefix="ClientTls.")
        return grpc.aio.secure_channel(
            address, channel_credentials(material), options=channel_options(self.server_name)
        )


class SidecarClient:
    """An async client of one sidecar's gRPC listener (owns its channel)."""

    def __init__(self, address: str, *, tls: ClientTls | None = None) -> None:
        self.channel = grpc.aio.insecure_channel(address) if tls is None else tls.channel(address)
        self.stub = pb_grpc.SidecarStub(self.channel)  # type: ignore[no-untyped-call]

    async def __aenter__(self) -> SidecarClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the channel."""
        await self.channel.close()

    async def call(
        self,
        upstream: str,
        method: str = "GET",
        path: str = "/",
        headers: Sequence[tuple[str, str]] = (),
        body: bytes = b"",
        *,
        timeout_ms: int = 0,
        serving_endpoint: str = "",
        deadline: float | None = None,
    ) -> Any:
        """One REST call through the sidecar; a `CallResponse` for any HTTP status.

        Raises CallRefused when the sidecar refused it, `grpc.aio.AioRpcError` otherwise
        (DEADLINE_EXCEEDED, NOT_FOUND, INVALID_ARGUMENT, UNAVAILABLE for an unreachable upstream).
        """
        request = pb.CallRequest(
            upstream=upstream,
            method=method,
            path=path,
            headers=[pb.Header(name=n, value=v) for n, v in headers],
            body=body,
            timeout_ms=timeout_ms,
            serving_endpoint=serving_endpoint,
        )
        try:
            return await self.stub.Call(request, timeout=deadline)
        except grpc.aio.AioRpcError as error:
            rejection = rejection_of(error)
            if rejection is not None:
                raise CallRefused(rejection, error.details() or "refused") from None
            raise

    async def check(self, upstream: str, endpoint: str = "", deadline: float = 5.0) -> Any:
        """Whether `upstream` (or `METHOD /route` of it) may be called now: a `CheckResponse`."""
        request = pb.CheckRequest(upstream=upstream, endpoint=endpoint)
        return await self.stub.Check(request, timeout=deadline)


async def watch_updates(
    channel: Any,
    subscriber_service: str,
    endpoints: Sequence[str] = (),
    since_version: int = 0,
    on_malformed: Callable[[Any, Exception], None] | None = None,
) -> AsyncIterator[AvailabilityUpdate]:
    """Subscribe to a sidecar's `Watch` stream; yield its updates as cascade objects.

    Messages that do not convert (a malformed endpoint) go to `on_malformed` and are skipped;
    signatures, expiry and versions are the receiver's to verify (`AvailabilityTable.receive`).
    The stream ends when the server ends it; errors propagate as `grpc.aio.AioRpcError`.
    """
    stub = pb_grpc.SidecarStub(channel)  # type: ignore[no-untyped-call]
    request = pb.WatchRequest(
        subscriber_service=subscriber_service,
        endpoints=list(endpoints),
        since_version=since_version,
    )
    async for message in stub.Watch(request):
        try:
            yield update_from_proto(message)
        except BadArgument as exc:
            if on_malformed is not None:
                on_malformed(message, exc)
            else:
                log.warning("dropped a malformed availability update: %s", exc)
