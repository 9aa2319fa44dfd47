"""The sidecar's gRPC API (ccb.v1.Sidecar): `Call`, `Check` and `Watch` on a grpc.aio server.

`Call` is `call.serve`: the proxy's one call pipeline, as for the outbound HTTP listener (hooks
and the cascade, breaker, retries and their budget, stats, keep-alive pool), compiled with the
request path; call.py maps its errors to gRPC statuses.

With `grpc_tls:` configured the listener serves TLS (mutual TLS with `client_auth`), its
certificates reloaded by `tls.GrpcTls`.

`Watch` streams from an injectable `UpdateSource` (the cascade plugs in its own); by default the
stream stays open and silent until the subscriber cancels it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from cascadebreaker import State
from cascadebreaker.cascade.endpoints import Endpoint
from cascadebreaker.cascade.updates import CauseChain
from cascadebreaker.sidecar.config import HostPort, SidecarConfig
from cascadebreaker.sidecar.grpc.call import CallRuntime, abort, serve
from cascadebreaker.sidecar.grpc.messages import (
    BadArgument,
    cause_chain_to_proto,
    circuit_state,
    retry_after_ms,
    update_to_proto,
    validate_endpoint,
)
from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2 as pb
from cascadebreaker.sidecar.grpc.tls import installed_tls
from cascadebreaker.sidecar.proxy.ports import (
    AvailabilityView,
    UpdateSource,
    WatchEnded,
    WatchSubscription,
    no_updates,
)

__all__ = [
    "CallRuntime",
    "GrpcServer",
    "SidecarService",
    "add_servicer",
    "start",
    "start_grpc_server",
]

log = logging.getLogger("cascadebreaker.sidecar.grpc")
_SERVICE = pb.DESCRIPTOR.services_by_name["Sidecar"].full_name  # ccb.v1.Sidecar


class SidecarService:
    """The ccb.v1.Sidecar servicer (registered by `start_grpc_server`)."""

    def __init__(
        self,
        runtime: CallRuntime,
        availability: AvailabilityView | None = None,
        update_source: UpdateSource | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.runtime = runtime
        self._availability = availability
        self._update_source = update_source
        self._wall = wall_clock

    @property
    def availability(self) -> AvailabilityView | None:
        """The cascade's view: given here, else `runtime.availability` when the cascade set it."""
        return self._availability or self.runtime.availability

    @property
    def update_source(self) -> UpdateSource:
        """Given here, else `runtime.update_source` when the cascade set it, else silence."""
        return self._update_source or self.runtime.update_source or no_updates

    async def Call(self, request: bytes, context: Any) -> bytes:
        """One REST call to an upstream through the sidecar (`call.serve`, compiled)."""
        return await serve(self.runtime, request, context)

    async def Check(self, request: Any, context: Any) -> Any:
        """Whether an upstream, or one endpoint of it, may be called now."""
        upstream = request.upstream
        if not upstream:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, "upstream: required")
        route = self.runtime.routes.get(upstream)
        if route is None or route.breaker is None:
            await abort(context, grpc.StatusCode.NOT_FOUND, f"unknown upstream {upstream!r}")
        target = Endpoint.service_wide(upstream)
        if request.endpoint:
            try:
                method, path = validate_endpoint(request.endpoint)
            except BadArgument as exc:
                await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            target = Endpoint(upstream, method, self.runtime.route_resolver(upstream, method, path))
        breaker = route.breaker
        state = breaker.state
        wait = breaker.retry_after
        # An OPEN breaker whose wait is over admits the next call as a probe: callable.
        blocked = state is State.OPEN and wait > 0
        chain: CauseChain = ()
        fraction, live = 1.0, 0
        view = self.availability
        if view is not None:
            unavailable = view.check(target)
            if unavailable is not None:
                chain = unavailable.cause_chain
                wait = max(wait if blocked else 0.0, unavailable.expires_at - self._wall())
            share = view.instances(target)
            fraction, live = share.fraction, share.live
        edges_to = getattr(self.runtime, "edges_to", None)  # set when the cascade is plugged in
        return pb.CheckResponse(
            available=not blocked and not chain,
            circuit_state=circuit_state(state),
            retry_after_ms=retry_after_ms(wait) if blocked or chain else 0,
            cause_chain=cause_chain_to_proto(chain),
            available_fraction=fraction,
            live_instances=live,
            edges=[
                pb.DependencyEdge(
                    caller=e["caller"],
                    callee=e["callee"],
                    required=e["required"],
                    optionality=e["optionality"],
                    survived=e["evidence"]["survived"],
                    failed_with=e["evidence"]["failedWith"],
                )
                for e in (edges_to(target) if edges_to is not None else ())
            ],
        )

    async def Watch(self, request: Any, context: Any) -> AsyncIterator[Any]:
        """Stream availability updates of this service's endpoints to a subscribing sidecar."""
        for text in request.endpoints:
            try:
                validate_endpoint(text, "endpoints")
            except BadArgument as exc:
                await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        # Headers now, not with the first update (which may be long coming): the subscriber
        # knows its stream is established.
        await context.send_initial_metadata(())
        subscription = WatchSubscription(
            subscriber_service=request.subscriber_service,
            endpoints=tuple(request.endpoints),
            since_version=request.since_version,
            peer=context.peer(),
        )
        try:
            async for update in self.update_source(subscription):
                yield update_to_proto(update)
        except WatchEnded as ended:
            # UNAVAILABLE, not OK: every gRPC client treats it as "reconnect" (docs/grpc.md).
            await abort(context, grpc.StatusCode.UNAVAILABLE, str(ended))


def add_servicer(service: SidecarService, server: Any) -> None:
    """Register the servicer as the generated `add_SidecarServicer_to_server` does, except that
    `Call` takes and answers serialized bytes (no deserializer or serializer: call_codec.py)."""
    handlers = {
        "Call": grpc.unary_unary_rpc_method_handler(
            service.Call, request_deserializer=None, response_serializer=None
        ),
        "Check": grpc.unary_unary_rpc_method_handler(
            service.Check,
            request_deserializer=pb.CheckRequest.FromString,
            response_serializer=pb.CheckResponse.SerializeToString,
        ),
        "Watch": grpc.unary_stream_rpc_method_handler(
            service.Watch,
            request_deserializer=pb.WatchRequest.FromString,
            response_serializer=pb.AvailabilityUpdate.SerializeToString,
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_SERVICE, handlers),))
    server.add_registered_method_handlers(_SERVICE, handlers)


@dataclass
class GrpcServer:
    """A running gRPC listener."""

    server: Any
    port: int
    service: SidecarService

    async def stop(self, grace: float | None = None) -> None:
        """Stop accepting calls; in-flight calls get `grace` seconds to finish."""
        await self.server.stop(grace)


async def start_grpc_server(
    config: SidecarConfig,
    runtime: CallRuntime,
    *,
    availability: AvailabilityView | None = None,
    update_source: UpdateSource | None = None,
) -> GrpcServer | None:
    """Serve ccb.v1.Sidecar on `listen.grpc` (None when that listener is disabled)."""
    if config.listen.grpc is None:
        return None
    return await start(runtime, config.listen.grpc, availability, update_source)


async def start(
    runtime: CallRuntime,
    address: HostPort,
    availability: AvailabilityView | None = None,
    update_source: UpdateSource | None = None,
) -> GrpcServer:
    """Serve ccb.v1.Sidecar on `address` (the plug point `SidecarServer` calls)."""
    # SO_REUSEPORT is on by default in gRPC: a second sidecar would share the port silently.
    server = grpc.aio.server(options=(("grpc.so_reuseport", 0),))
    service = SidecarService(runtime, availability, update_source)
    add_servicer(service, server)
    host = f"[{address.host}]" if ":" in address.host else address.host
    tls = installed_tls(runtime)  # a `GrpcTls` when `grpc_tls:` is configured
    try:
        if tls is None:
            port = server.add_insecure_port(f"{host}:{address.port}")
        else:
            port = server.add_secure_port(f"{host}:{address.port}", tls.server_credentials())
    except RuntimeError as exc:
        raise OSError(f"listen.grpc: cannot bind {address}: {exc}") from exc
    if port == 0:
        raise OSError(f"listen.grpc: cannot bind {address}")
    await server.start()
    log.info(
        "gRPC API listening on %s:%d (%s)",
        address.host,
        port,
        "plaintext" if tls is None else "mutual TLS" if tls.config.client_auth else "TLS",
    )
    return GrpcServer(server, port, service)
