"""The gRPC `Call`: one REST call through the proxy's pipeline, errors mapped to gRPC statuses.

Compiled with the request path (pyproject.toml's mypyc list): a `Call` does what an HTTP
request does, so it runs the same native code. grpc.aio runs a handler on its event loop only
if `inspect.iscoroutinefunction` says it is one, which no compiled function is: the servicer's
`Call` (api.py) stays an interpreted `async def` whose whole body is `await serve(...)`.

    UnknownUpstream      -> NOT_FOUND
    CallRejected         -> UNAVAILABLE + `grpc-status-details-bin` (google.rpc.Status with
                            ErrorInfo + RetryInfo, status.py) and `ccb-rejection-bin` (a
                            serialized Rejection, kept for one release)
    UpstreamTimeout      -> DEADLINE_EXCEEDED + `ccb-upstream-error: timeout`
    other UpstreamError  -> UNAVAILABLE + `ccb-upstream-error: connect|reset|protocol|error`
    BadArgument          -> INVALID_ARGUMENT
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NoReturn, Protocol

import grpc

from cascadebreaker.cascade.trust import SERVING_ENDPOINT_HEADER
from cascadebreaker.sidecar.grpc.call_codec import decode_call, encode_call_response
from cascadebreaker.sidecar.grpc.messages import (
    REJECTION_METADATA,
    UPSTREAM_ERROR_METADATA,
    BadArgument,
    rejection_to_proto,
)
from cascadebreaker.sidecar.grpc.status import STATUS_DETAILS_METADATA, rejection_status
from cascadebreaker.sidecar.http.wire import RawHeaders, forwardable
from cascadebreaker.sidecar.proxy.errors import CallRejected, UnknownUpstream
from cascadebreaker.sidecar.proxy.hooks import RouteResolver
from cascadebreaker.sidecar.proxy.ports import AvailabilityView, EdgesTo, UpdateSource
from cascadebreaker.sidecar.proxy.routes import Route
from cascadebreaker.sidecar.upstream.client import RawResponse
from cascadebreaker.sidecar.upstream.model import UpstreamError, UpstreamResponse, UpstreamTimeout

__all__ = ["CallRuntime", "abort", "serve"]

_SERVING_ENDPOINT: Final = SERVING_ENDPOINT_HEADER.encode()


class CallRuntime(Protocol):
    """What the gRPC API needs from the sidecar (`SidecarRuntime` provides it)."""

    service: str
    route_resolver: RouteResolver
    availability: AvailabilityView | None
    update_source: UpdateSource | None
    edges_to: EdgesTo | None

    @property
    def routes(self) -> Mapping[str, Route]:
        """The configured upstreams by name."""
        ...

    async def call(
        self,
        upstream: str,
        method: str,
        path: str,
        headers: list[tuple[str, str]],
        body: bytes,
        timeout: float | None,  # noqa: ASYNC109 - per read, as in the HTTP path
    ) -> UpstreamResponse:
        """One REST call through the pipeline (hooks, breaker, pool, retries)."""
        ...

    async def call_raw(
        self,
        upstream: str,
        method: bytes,
        path: bytes,
        headers: RawHeaders,
        body: bytes,
        timeout: float | None,  # noqa: ASYNC109 - per read, as in the HTTP path
    ) -> RawResponse:
        """`call` as the wire has it: end-to-end headers in bytes, the response's left raw."""
        ...


async def serve(runtime: CallRuntime, request: bytes, context: Any) -> bytes:
    """One REST call to an upstream through the sidecar: the request's bytes in
    (`decode_call`), the reply's bytes out (`encode_call_response`)."""
    try:
        args = decode_call(request)
    except BadArgument as exc:
        await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    upstream = args.upstream
    route = runtime.routes.get(upstream)
    if route is None:
        await abort(context, grpc.StatusCode.NOT_FOUND, f"unknown upstream {upstream!r}")
    headers = args.headers
    if args.serving:
        # The header names the service too (`checkout POST /v1/orders`); the field does not.
        serving = f"{runtime.service} {args.serving}".encode("latin-1")
        headers.append((_SERVING_ENDPOINT, serving))
    if headers:
        # Hooks see what the HTTP path shows them: end-to-end headers only.
        headers = forwardable(headers, True)
    try:
        response = await runtime.call_raw(
            upstream,
            args.method,
            args.path,
            headers,
            args.body,
            timeout(route, args.timeout_ms, context.time_remaining()),
        )
    except UnknownUpstream as exc:
        await abort(context, grpc.StatusCode.NOT_FOUND, str(exc))
    except CallRejected as exc:
        rejection = exc.rejection
        message = rejection_to_proto(upstream, rejection.body, rejection.retry_after)
        details = f"{upstream}: {rejection.body.get('error', 'rejected')}"
        status = rejection_status(details, rejection.body)
        await abort(
            context,
            grpc.StatusCode.UNAVAILABLE,
            details,
            trailing_metadata=(
                (STATUS_DETAILS_METADATA, status.SerializeToString()),
                (REJECTION_METADATA, message.SerializeToString()),  # the pre-contract form
            ),
        )
    except UpstreamError as exc:
        timed_out = isinstance(exc, UpstreamTimeout)
        await abort(
            context,
            grpc.StatusCode.DEADLINE_EXCEEDED if timed_out else grpc.StatusCode.UNAVAILABLE,
            str(exc),
            trailing_metadata=((UPSTREAM_ERROR_METADATA, exc.kind),),
        )
    return encode_call_response(response.status, response.headers, response.body)


async def abort(
    context: Any, code: Any, details: str, trailing_metadata: tuple[tuple[str, Any], ...] = ()
) -> NoReturn:
    """End the call with a status (grpc.aio's abort raises; this tells the type checker so)."""
    await context.abort(code, details, trailing_metadata=trailing_metadata)
    raise AssertionError("context.abort returned")  # pragma: no cover


def timeout(route: Route, timeout_ms: int, remaining: float | None) -> float | None:
    """The per-read timeout: the request's, else the upstream's, capped by the gRPC deadline."""
    given = timeout_ms / 1000 if timeout_ms else None
    if remaining is None:
        return given
    return min(given if given is not None else route.timeout, max(remaining, 0.001))
