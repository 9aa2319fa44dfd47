"""Keep-alive connection pools to upstreams and a lean HTTP/1.1 client on top of them.

Two ways in:

* `UpstreamClient.request(...)`: a plain async call returning a buffered `UpstreamResponse`
  (used by the gRPC `Call` API and anything that wants a whole response);
* `UpstreamPool.acquire_nowait()` / `connect()` + `UpstreamConnection.send(...)` with a
  `ResponseSink` (`upstream_pool.py`): callback-level streaming used by the proxy's hot path.

Neither applies a circuit breaker: that is `SidecarRuntime.call` / the proxy's job. The error
tree lives in `upstream_model.py` and is re-exported here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence

from cascadebreaker.sidecar.upstream_model import (
    UpstreamConnectError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamReset,
    UpstreamResponse,
    UpstreamTarget,
    UpstreamTimeout,
)
from cascadebreaker.sidecar.upstream_pool import (
    ResponseSink,
    TimeoutWatch,
    UpstreamConnection,
    UpstreamPool,
)
from cascadebreaker.sidecar.wire import LAST_CHUNK, RawHeaders, forwardable, request_head


class _BufferingSink:
    """Collects a whole response into a future (for `UpstreamClient.request`)."""

    def __init__(self, future: asyncio.Future[UpstreamResponse]) -> None:
        self.future = future
        self.status = 0
        self.headers: RawHeaders = []
        self.body: list[bytes] = []

    def response_head(
        self,
        status: int,
        reason: bytes,
        headers: RawHeaders,
        chunked: bool,
        content_length: int | None,
    ) -> None:
        self.status = status
        self.headers = headers

    def response_body(self, data: bytes) -> None:
        self.body.append(data)

    def response_end(self) -> None:
        if not self.future.done():
            headers = [(n.decode("latin-1").lower(), v.decode("latin-1")) for n, v in self.headers]
            self.future.set_result(UpstreamResponse(self.status, headers, b"".join(self.body)))

    def response_failed(self, error: UpstreamError) -> None:
        if not self.future.done():
            self.future.set_exception(error)

    def upstream_writable(self, writable: bool) -> None:
        pass  # the whole body is written at once


HeadersArg = Mapping[str, str] | Sequence[tuple[str, str]]


class UpstreamClient:
    """Pools for every configured upstream, and an async request API over them."""

    def __init__(
        self, targets: Iterable[UpstreamTarget], loop: asyncio.AbstractEventLoop | None = None
    ) -> None:
        self.loop = loop or asyncio.get_running_loop()
        self.pools = {t.name: UpstreamPool(t, self.loop) for t in targets}

    def pool(self, upstream: str) -> UpstreamPool:
        """The pool of a configured upstream (KeyError when unknown)."""
        return self.pools[upstream]

    async def request(
        self,
        upstream: str,
        method: str,
        path: str,
        headers: HeadersArg = (),
        body: bytes = b"",
        timeout: float | None = None,  # noqa: ASYNC109 - per read
    ) -> UpstreamResponse:
        """Send one request and return the whole response; raises UpstreamError subclasses.

        `path` is relative to the upstream's base URL; hop-by-hop headers are dropped, Host and
        Content-Length are set by the client. `timeout` defaults to the upstream's timeout.
        """
        pool = self.pools[upstream]
        target = pool.target
        items = headers.items() if isinstance(headers, Mapping) else headers
        raw = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in items]
        method_b = method.upper().encode("ascii")
        framing = (
            b"content-length: %d\r\n" % len(body) if body or method_b in _BODY_METHODS else b""
        )
        head = request_head(
            method_b,
            target.base_path + (path.encode() or b"/"),
            target.authority,
            forwardable(raw, True),
            framing,
        )
        is_head = method_b == b"HEAD"
        wait = timeout if timeout is not None else target.timeout
        for attempt in (0, 1):
            conn = pool.acquire_nowait() or await pool.connect()
            future: asyncio.Future[UpstreamResponse] = self.loop.create_future()
            conn.send(head, _BufferingSink(future), wait, is_head, body)
            try:
                return await future
            except UpstreamReset as exc:
                # Stale keep-alive race: replay once on a fresh connection.
                if attempt or not exc.reused or exc.response_started:
                    raise
            except asyncio.CancelledError:
                conn.abort()
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        """Close all pooled connections."""
        for pool in self.pools.values():
            pool.close()


_BODY_METHODS = frozenset({b"POST", b"PUT", b"PATCH"})

__all__ = [
    "LAST_CHUNK",
    "ResponseSink",
    "TimeoutWatch",
    "UpstreamClient",
    "UpstreamConnectError",
    "UpstreamConnection",
    "UpstreamError",
    "UpstreamPool",
    "UpstreamProtocolError",
    "UpstreamReset",
    "UpstreamResponse",
    "UpstreamTarget",
    "UpstreamTimeout",
]
