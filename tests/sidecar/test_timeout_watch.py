"""The pool's stall check over real sockets: it fails stalled exchanges, spares idle and
answered ones, sleeps when nothing is busy, and keeps watching exchanges started meanwhile."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from cascadebreaker.sidecar.upstream import (
    UpstreamConnection,
    UpstreamError,
    UpstreamPool,
    UpstreamTarget,
    UpstreamTimeout,
)

HEAD = b"GET / HTTP/1.1\r\nhost: up\r\n\r\n"
TIMEOUT = 0.2


class _Sink:
    """Records what the connection reports; `on_failed` runs inside the failure callback."""

    def __init__(self, on_failed: Callable[[UpstreamError], None] | None = None) -> None:
        self.done: asyncio.Future[UpstreamError | None] = asyncio.get_running_loop().create_future()
        self.on_failed = on_failed

    def response_head(self, *_: object) -> None:
        pass

    def response_body(self, data: bytes) -> None:
        pass

    def response_end(self) -> None:
        self.done.set_result(None)

    def response_failed(self, error: UpstreamError) -> None:
        self.done.set_result(error)
        if self.on_failed is not None:
            self.on_failed(error)

    def upstream_writable(self, writable: bool) -> None:
        pass


@pytest.fixture
async def silent_upstream() -> AsyncIterator[tuple[str, asyncio.Queue[asyncio.StreamWriter]]]:
    """An upstream that never answers by itself: the writers of the connections that sent a
    request head are queued, for a test to answer on."""
    writers: list[asyncio.StreamWriter] = []
    requested: asyncio.Queue[asyncio.StreamWriter] = asyncio.Queue()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        try:
            await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        requested.put_nowait(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}", requested
    for writer in writers:
        writer.close()
    server.close()
    await server.wait_closed()


def _pool(url: str) -> UpstreamPool:
    target = UpstreamTarget.from_url("up", url, timeout=TIMEOUT)
    return UpstreamPool(target, asyncio.get_running_loop())


async def test_a_stalled_exchange_times_out_and_the_watch_then_sleeps(
    silent_upstream: tuple[str, asyncio.Queue[asyncio.StreamWriter]],
) -> None:
    pool = _pool(silent_upstream[0])
    conn = await pool.connect()
    sink = _Sink()
    conn.send(HEAD, sink, timeout=TIMEOUT)
    assert pool.watch.handle is not None  # armed by the exchange
    error = await asyncio.wait_for(sink.done, 5)
    assert isinstance(error, UpstreamTimeout)
    assert "no response within 0.2s" in str(error)
    assert conn.closed and pool.open_count == 0
    await asyncio.sleep(pool.watch.resolution * 3)
    assert pool.watch.handle is None  # nothing busy: no periodic check
    pool.close()


async def test_idle_and_answered_connections_are_spared(
    silent_upstream: tuple[str, asyncio.Queue[asyncio.StreamWriter]],
) -> None:
    url, requested = silent_upstream
    pool = _pool(url)
    answered = await pool.connect()
    idle = await pool.connect()
    pool.release(idle)
    sink = _Sink()
    answered.send(HEAD, sink, timeout=TIMEOUT)
    busy = await asyncio.wait_for(requested.get(), 5)
    busy.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
    assert await asyncio.wait_for(sink.done, 5) is None
    await asyncio.sleep(TIMEOUT * 2)  # past the timeout: the watch must not touch either one
    assert not answered.closed and not idle.closed
    assert pool.idle_count == 2
    assert requested.empty()  # the idle connection never sent anything
    assert pool.watch.handle is None
    pool.close()


async def test_an_exchange_started_while_a_stall_fails_is_watched_too(
    silent_upstream: tuple[str, asyncio.Queue[asyncio.StreamWriter]],
) -> None:
    """A retry from inside the failure callback (as the pipeline's) starts on a fresh
    connection during the check: it must time out as well, and the watch then sleeps."""
    pool = _pool(silent_upstream[0])
    first = await pool.connect()
    spare = await pool.connect()
    retry_sink = _Sink()

    def retry(_error: UpstreamError) -> None:
        spare.send(HEAD, retry_sink, timeout=TIMEOUT)

    first.send(HEAD, _Sink(on_failed=retry), timeout=TIMEOUT)
    error = await asyncio.wait_for(retry_sink.done, 5)
    assert isinstance(error, UpstreamTimeout)
    assert first.closed and spare.closed
    await asyncio.sleep(pool.watch.resolution * 3)
    assert pool.watch.handle is None
    pool.close()


async def test_a_connection_without_an_exchange_is_not_busy() -> None:
    pool = UpstreamPool(
        UpstreamTarget.from_url("up", "http://127.0.0.1:1"), asyncio.get_running_loop()
    )
    conn = UpstreamConnection(pool)
    assert conn.check_timeout(asyncio.get_running_loop().time()) is False  # no exchange
    pool.close()
