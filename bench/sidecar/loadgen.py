"""Two load generators wrk cannot be: a fixed-rate open-loop HTTP client, and a gRPC client.

Fixed rate (`paced_http`): requests leave on a fixed schedule (`rate` per second) over a pool of
keep-alive connections, whether or not earlier ones have answered (open loop; Debian has no
wrk2). Latency is measured from the write to the last response byte; a request that had to wait
for a free connection is measured from its scheduled time instead, so a stall is never hidden
(no coordinated omission). The event loop wakes about every millisecond, which at 1000 rps is
one request per wake-up: the arrivals are as even as a Python client can make them.

gRPC (`grpc_calls`): `connections` concurrent callers loop on `Sidecar.Call` over one channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

import httptools


@dataclass
class LoadResult:
    """Latencies in µs (sorted) and what was sent."""

    latencies_us: list[float]
    seconds: float
    errors: int = 0
    late: int = 0  # requests that waited for a free connection

    @property
    def rps(self) -> float:
        """Completed requests per second."""
        return len(self.latencies_us) / self.seconds if self.seconds else 0.0

    def percentile(self, p: float) -> float:
        """The p-th percentile (nearest rank) in µs."""
        data = self.latencies_us
        if not data:
            return float("nan")
        rank = max(0, min(len(data) - 1, round(p / 100 * len(data) + 0.5) - 1))
        return data[rank]


class _Connection(asyncio.Protocol):
    """One keep-alive connection: one request in flight at a time."""

    def __init__(self, client: _PacedClient) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.started = 0.0
        self.ok = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def send(self, request: bytes, started: float) -> None:
        self.started = started
        if self.transport is not None:
            self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        ok = self.parser.get_status_code() == 200
        self.client.completed(self, time.perf_counter() - self.started, ok)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.lost(self)


class _PacedClient:
    def __init__(self, request: bytes) -> None:
        self.request = request
        self.free: list[_Connection] = []
        self.backlog: list[float] = []  # scheduled times of requests waiting for a connection
        self.latencies: list[float] = []
        self.errors = 0
        self.late = 0
        self.in_flight = 0
        self.recording = True
        self.idle = asyncio.Event()

    def dispatch(self, scheduled: float) -> None:
        self.in_flight += 1
        self.idle.clear()
        if self.free:
            self.free.pop().send(self.request, time.perf_counter())
        else:
            self.late += 1
            self.backlog.append(scheduled)

    def completed(self, conn: _Connection, seconds: float, ok: bool) -> None:
        self.in_flight -= 1
        if not self.in_flight:
            self.idle.set()
        if self.recording:
            if ok:
                self.latencies.append(seconds * 1e6)
            else:
                self.errors += 1
        if self.backlog:
            conn.send(self.request, self.backlog.pop(0))
        else:
            self.free.append(conn)

    def lost(self, conn: _Connection) -> None:
        if conn in self.free:
            self.free.remove(conn)


async def paced_http(
    host: str, port: int, path: str, rate: float, seconds: float, pool: int = 32
) -> LoadResult:
    """Send `rate` GETs per second for `seconds` (after a 0.5 s warm-up); see module docstring."""
    loop = asyncio.get_running_loop()
    request = f"GET {path} HTTP/1.1\r\nhost: {host}:{port}\r\n\r\n".encode()
    client = _PacedClient(request)
    for _ in range(pool):
        _, conn = await loop.create_connection(lambda: _Connection(client), host, port)
        client.free.append(conn)
    for phase, length in (("warm-up", 0.5), ("measure", seconds)):
        client.recording = phase == "measure"
        client.latencies, client.late, client.errors = [], 0, 0
        start = time.perf_counter()
        sent = 0
        while True:
            elapsed = time.perf_counter() - start
            if elapsed >= length:
                break
            due = int(elapsed * rate)
            while sent < due:
                client.dispatch(start + sent / rate)
                sent += 1
            # Sleep to the next send, at least 1 ms: a spinning client would steal a core.
            await asyncio.sleep(max(0.001, start + (sent + 1) / rate - time.perf_counter()))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                await client.idle.wait()
    for conn in client.free:
        if conn.transport is not None:
            conn.transport.close()
    return LoadResult(sorted(client.latencies), seconds, client.errors, client.late)


async def grpc_calls(address: str, upstream: str, connections: int, seconds: float) -> LoadResult:
    """`connections` concurrent callers loop on Sidecar.Call for `seconds` (0.5 s warm-up)."""
    import grpc

    from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2 as pb
    from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2_grpc

    latencies: list[float] = []
    errors = 0
    async with grpc.aio.insecure_channel(address) as channel:
        stub = sidecar_pb2_grpc.SidecarStub(channel)  # type: ignore[no-untyped-call]
        request = pb.CallRequest(upstream=upstream, method="GET", path="/")

        async def caller(until: float, record: bool) -> None:
            nonlocal errors
            while time.perf_counter() < until:
                started = time.perf_counter()
                try:
                    response = await stub.Call(request, timeout=10)
                except grpc.aio.AioRpcError:
                    errors += 1
                    continue
                if record:
                    if response.status == 200:
                        latencies.append((time.perf_counter() - started) * 1e6)
                    else:
                        errors += 1

        for length, record in ((0.5, False), (seconds, True)):
            until = time.perf_counter() + length
            await asyncio.gather(*(caller(until, record) for _ in range(connections)))
    return LoadResult(sorted(latencies), seconds, errors)
