"""The pool's stall check over real sockets: it fails stalled exchanges, spares idle and
answered ones, sleeps when nothing is busy, keeps watching exchanges started meanwhile, and
wakes for the earliest deadline, not periodically."""

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
from cascadebreaker.sidecar.upstream.connection import NO_DEADLINE

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
    """An upstream that never answers by itself: a connection's writer is queued for each
    request head it sent, for a test to answer on."""
    writers: list[asyncio.StreamWriter] = []
    requested: asyncio.Queue[asyncio.StreamWriter] = asyncio.Queue()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        while True:  # each request head on the connection queues its writer again
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
    assert conn.check_timeout(asyncio.get_running_loop().time()) == NO_DEADLINE  # none
    pool.close()


async def test_the_check_is_armed_for_the_deadline_not_the_resolution(
    silent_upstream: tuple[str, asyncio.Queue[asyncio.StreamWriter]],
) -> None:
    pool = _pool(silent_upstream[0])
    conn = await pool.connect()
    loop = asyncio.get_running_loop()
    sent_at = loop.time()
    conn.send(HEAD, _Sink(), timeout=TIMEOUT)
    handle = pool.watch.handle
    assert handle is not None
    assert handle.when() >= sent_at + TIMEOUT - 0.002  # not `resolution` (0.01 s) from now
    assert abs(pool.watch.due - handle.when()) < 0.002  # uvloop keeps timers in whole ms
    pool.close()
    assert pool.watch.due == NO_DEADLINE


async def test_steady_traffic_wakes_the_check_once_per_timeout_at_most(
    silent_upstream: tuple[str, asyncio.Queue[asyncio.StreamWriter]],
) -> None:
    """Answered exchanges back to back for three timeouts: a check per deadline (each one
    finds the busy exchange's later deadline and arms for it), not one per `resolution`."""
    url, requested = silent_upstream
    pool = _pool(url)
    first = await pool.connect()
    pool.release(first)
    loop = asyncio.get_running_loop()
    checks: list[asyncio.TimerHandle] = []  # each check the watch arms is a new handle
    started = loop.time()
    exchanges = 0
    while loop.time() - started < 3 * TIMEOUT:
        conn = pool.acquire_nowait()
        assert conn is first  # kept alive: never failed by a check
        sink = _Sink()
        conn.send(HEAD, sink, timeout=TIMEOUT)
        writer = await asyncio.wait_for(requested.get(), 5)
        await asyncio.sleep(0.002)  # the exchange stays busy across some loop iterations
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
        assert await asyncio.wait_for(sink.done, 5) is None
        exchanges += 1
        handle = pool.watch.handle
        if handle is not None and all(handle is not h for h in checks):
            checks.append(handle)
    elapsed = loop.time() - started
    assert exchanges > 10 and not first.closed
    # A periodic check would have armed elapsed / resolution (60+) of them.
    assert pool.watch.resolution < TIMEOUT / 10
    assert len(checks) <= elapsed / TIMEOUT + 2, (len(checks), elapsed)
    pool.close()


async def test_a_shorter_timeout_than_the_armed_check_is_not_missed(
    silent_upstream: tuple[str, asyncio.Queue[asyncio.StreamWriter]],
) -> None:
    """An exchange with a long timeout arms the check far ahead; one started later with a
    short timeout must still fail on time (it arms the check earlier)."""
    pool = _pool(silent_upstream[0])
    long_wait = await pool.connect()
    short_wait = await pool.connect()
    long_wait.send(HEAD, _Sink(), timeout=30.0)
    assert pool.watch.handle is not None
    sink = _Sink()
    short_wait.send(HEAD, sink, timeout=TIMEOUT)
    error = await asyncio.wait_for(sink.done, 5)  # 30 s if the far check were kept
    assert isinstance(error, UpstreamTimeout)
    assert short_wait.closed and not long_wait.closed
    assert pool.watch.handle is not None  # still watching the long one
    pool.close()
