"""A lean async HTTP/1.1 client over the keep-alive pools: whole responses, no breaker.

Two ways in:

* `UpstreamClient.request(...)`: a plain async call returning a buffered `UpstreamResponse`;
* `fetch(pool, head, body, ...)`: one exchange on a pooled connection, buffered (the proxy's
  async driver, behind the gRPC `Call`, uses it and decides replays and retries itself).

The callback-level streaming used by the proxy's HTTP exchange is `UpstreamPool` +
`UpstreamConnection.send(...)` with a `ResponseSink` (pool.py, connection.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence

from cascadebreaker.sidecar.http.framing import whole_body_framing
from cascadebreaker.sidecar.http.wire import RawHeaders, forwardable, request_head
from cascadebreaker.sidecar.upstream.model import (
    UpstreamError,
    UpstreamReset,
    UpstreamResponse,
    UpstreamTarget,
)
from cascadebreaker.sidecar.upstream.pool import UpstreamPool

__all__ = ["HeadersArg", "RawResponse", "UpstreamClient", "fetch", "fetch_raw"]


class RawResponse:
    """A whole response as received: end-to-end headers in raw bytes, original case.

    A plain class, not a NamedTuple: compiled, one is built natively (a NamedTuple's
    generated `__new__` is an interpreted frame, ~2k instructions per gRPC `Call`)."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: RawHeaders, body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def __repr__(self) -> str:
        return f"RawResponse({self.status!r}, {self.headers!r}, {self.body!r})"

    def decoded(self) -> UpstreamResponse:
        """As `UpstreamResponse` (names lower-cased, latin-1 text)."""
        headers = [(n.decode("latin-1").lower(), v.decode("latin-1")) for n, v in self.headers]
        return UpstreamResponse(self.status, headers, self.body)


class _BufferingSink:
    """Collects a whole response into a future (for `fetch_raw`)."""

    def __init__(self, future: asyncio.Future[RawResponse]) -> None:
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
            self.future.set_result(RawResponse(self.status, self.headers, b"".join(self.body)))

    def response_failed(self, error: UpstreamError) -> None:
        if not self.future.done():
            self.future.set_exception(error)

    def upstream_writable(self, writable: bool) -> None:
        pass  # the whole body is written at once


HeadersArg = Mapping[str, str] | Sequence[tuple[str, str]]


async def fetch(
    pool: UpstreamPool, head: bytes, body: bytes, read_timeout: float, head_request: bool = False
) -> UpstreamResponse:
    """One exchange on an idle or new connection of `pool`, the whole response buffered.

    `read_timeout` bounds the wait for the head and each read after it. Raises UpstreamError
    subclasses; no replay (the caller decides). Cancelled, the connection
    is dropped (its exchange cannot be finished).
    """
    return (await fetch_raw(pool, head, body, read_timeout, head_request)).decoded()


async def fetch_raw(
    pool: UpstreamPool, head: bytes, body: bytes, read_timeout: float, head_request: bool = False
) -> RawResponse:
    """As `fetch`, the headers left raw (the async driver shows them to hooks as they are)."""
    conn = pool.acquire_nowait() or await pool.connect()
    future: asyncio.Future[RawResponse] = pool.loop.create_future()
    conn.send(head, _BufferingSink(future), read_timeout, head_request, body)
    try:
        return await future
    except asyncio.CancelledError:
        conn.abort()
        raise


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
        head = request_head(
            method_b,
            target.base_path + (path.encode() or b"/"),
            target.authority,
            forwardable(raw, True),
            whole_body_framing(method_b, len(body)),
        )
        is_head = method_b == b"HEAD"
        wait = timeout if timeout is not None else target.timeout
        try:
            return await fetch(pool, head, body, wait, is_head)
        except UpstreamReset as exc:
            # Stale keep-alive race: replay once on a fresh connection.
            if not exc.reused or exc.response_started:
                raise
        return await fetch(pool, head, body, wait, is_head)

    def close(self) -> None:
        """Close all pooled connections."""
        for pool in self.pools.values():
            pool.close()
