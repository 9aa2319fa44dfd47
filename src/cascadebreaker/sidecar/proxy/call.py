"""The async driver of the call pipeline: one call made from code, the whole response buffered.

`SidecarRuntime.call` (and through it the gRPC `Call`) runs here. The pipeline decides, as for
the HTTP exchange: hooks and reroute, admission, classification, replay of a stale keep-alive
connection, retries within the budget, stats; this loop only awaits what it asks for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from cascadebreaker.sidecar.http.framing import whole_body_framing
from cascadebreaker.sidecar.http.wire import forwardable, request_head
from cascadebreaker.sidecar.proxy.errors import CallRejected, UnknownUpstream
from cascadebreaker.sidecar.proxy.hooks import Direction
from cascadebreaker.sidecar.proxy.pipeline import FAIL, REPLAY, AdmitLater, Call
from cascadebreaker.sidecar.upstream.client import HeadersArg, RawResponse, fetch_raw
from cascadebreaker.sidecar.upstream.model import UpstreamError, UpstreamResponse

if TYPE_CHECKING:
    from cascadebreaker.sidecar.proxy.runtime import SidecarRuntime

__all__ = ["call_upstream"]

CLIENT = "grpc"  # what hooks see as the client of a call made from code


async def call_upstream(
    runtime: SidecarRuntime,
    upstream: str,
    method: str,
    path: str,
    headers: HeadersArg = (),
    body: bytes = b"",
    timeout: float | None = None,  # noqa: ASYNC109 - per read, as in the HTTP path
) -> UpstreamResponse:
    """One call through the pipeline (see `SidecarRuntime.call`)."""
    route = runtime.routes.get(upstream)
    if route is None:
        raise UnknownUpstream(upstream)
    items = headers.items() if isinstance(headers, Mapping) else headers
    raw = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in items]
    method_b = method.upper().encode("ascii")
    # Hooks see what the HTTP path shows them: end-to-end headers only.
    call = Call(
        Direction.OUTBOUND,
        route,
        method_b,
        path.encode(),
        forwardable(raw, True),
        CLIENT,
        bool(body),
        True,  # the body is held whole: it can be sent again
    )
    pipeline = runtime.pipeline
    verdict = pipeline.start(call)
    while True:
        if isinstance(verdict, AdmitLater):
            verdict = await pipeline.admit_later(call)
        if verdict is not None:
            raise CallRejected(call.route.name, verdict)
        try:
            response = await _send(call, body, timeout)
        except UpstreamError as error:
            action = pipeline.failed(call, error)
            if action == FAIL:
                raise
            verdict = None if action == REPLAY else pipeline.retry(call)
            continue
        except BaseException:
            pipeline.cancelled(call)
            raise
        # Hooks see (and may edit) the raw headers, as on the HTTP path; decoded once, after.
        if pipeline.response(call, response.status, response.headers):
            verdict = pipeline.retry(call)
            continue
        pipeline.finish(call)
        info = call.info
        return RawResponse(
            response.status,
            response.headers if info is None else info.response_headers,
            response.body,
        ).decoded()


async def _send(call: Call, body: bytes, read_timeout: float | None) -> RawResponse:
    route = call.route
    pool = route.pool_for(call.turn, call.attempt)
    target = pool.target
    headers = call.headers
    if call.info is not None and call.info.add_headers:
        headers = [*headers, *call.info.add_headers]
    head = request_head(
        call.method,
        target.base_path + (call.path or b"/"),
        target.authority,
        headers,
        whole_body_framing(call.method, len(body)),
    )
    wait = read_timeout if read_timeout is not None else route.timeout
    return await fetch_raw(pool, head, body, wait, call.method == b"HEAD")
