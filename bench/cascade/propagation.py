"""Propagation latency: from a root breaker opening to the sidecars k hops away knowing it.

A chain of sidecars s0 <- s1 <- s2 <- s3 <- s4 (static edges `sk GET /x -> s(k-1) GET /x`,
each subscribed to the previous one's Watch stream). s0's breaker guards `leaf` (nginx:
`/fail` answers 500, everything else 200; failure_threshold 1). One trip:

1. t0 (bench clock), then the bench sends `GET /leaf/fail` to s0's outbound listener: the
   breaker opens, s0 marks `s0 GET /x` unavailable and pushes it to s1, and so on;
2. the bench is itself subscribed to every sidecar's Watch stream and notes when each sidecar's
   own "unavailable" update arrives. Hop k = sidecar sk: it refuses calls to `s(k-1) GET /x`
   from the moment it derived its update, so the measured time is an upper bound (it includes
   one more delivery, to the bench);
3. after the breaker's 0.25 s open period a probe (`GET /leaf/ok`) closes it; the bench waits
   until every sidecar says `GET /x` is available again, then starts the next trip.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import httpx

from bench.sidecar.procs import Proc, free_port, start_nginx, start_sidecar
from cascadebreaker.sidecar.grpc.client import watch_updates

HOPS = 4
RECOVERY = 0.25
SECRET = "bench-cascade-secret"

LEAF = """\
    server {{
        listen 127.0.0.1:{port};
        location /fail {{ return 500 "fail"; }}
        location / {{ default_type text/plain; return 200 "ok"; }}
    }}
"""


@dataclass
class Chain:
    """The running chain: the leaf and the sidecars s0..s4."""

    leaf: Proc
    sidecars: list[Proc]

    def stop(self) -> None:
        for proc in (*self.sidecars, self.leaf):
            proc.stop()


@dataclass
class Trips:
    """Latencies (seconds) per hop over all trips."""

    by_hop: dict[int, list[float]] = field(default_factory=dict)
    lost: int = 0


def start_chain(workdir: Path) -> Chain:
    """Start the leaf and s0..s4 (each subscribed to the previous one through config)."""
    port = free_port()
    leaf = start_nginx("leaf", workdir, LEAF.format(port=port), port)
    sidecars: list[Proc] = []
    for k in range(HOPS + 1):
        name = f"s{k}"
        grpc_port = free_port()
        if k == 0:
            upstream, target = "leaf", f"http://127.0.0.1:{port}"
            edges = [{"caller": "s0 GET /x", "callee": "leaf GET /x"}]
            peers: dict[str, str] = {}
        else:
            previous = sidecars[-1]
            upstream, target = f"s{k - 1}", f"http://127.0.0.1:{port}"
            edges = [{"caller": f"{name} GET /x", "callee": f"s{k - 1} GET /x"}]
            peers = {upstream: f"127.0.0.1:{previous.extra_ports['grpc']}"}
        config = {
            "service": name,
            "listen": {
                "outbound": f"127.0.0.1:{free_port()}",
                "inbound": None,
                "grpc": f"127.0.0.1:{grpc_port}",
                "admin": f"127.0.0.1:{free_port()}",
            },
            "upstreams": {
                upstream: {
                    "url": target,
                    "breaker": {"failure_threshold": 1, "recovery_timeout": RECOVERY},
                }
            },
            "cascade": {"secret": SECRET, "edges": edges, "peers": peers},
            "log_level": "warning",
        }
        sidecars.append(start_sidecar(workdir, name, config, f"/{upstream}/"))
    return Chain(leaf, sidecars)


async def _watch(address: str, hop: int, arrivals: dict[int, float], wake: asyncio.Event) -> None:
    """Note when the sidecar's own `GET /x` becomes unavailable (reconnecting if needed)."""
    while True:
        channel = grpc.aio.insecure_channel(address)
        try:
            async for update in watch_updates(channel, "bench"):
                if not update.available and update.endpoint.template == "/x":
                    arrivals.setdefault(hop, time.monotonic())
                    wake.set()
        except grpc.aio.AioRpcError:
            await asyncio.sleep(0.05)
        finally:
            await channel.close(None)


async def get(port: int, path: str) -> int:
    """One `GET path` on a fresh connection; the response status."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".encode())
        status = int((await reader.readline()).split()[1])
        await reader.read()
        return status
    finally:
        writer.close()


async def _all_available(client: httpx.AsyncClient, chain: Chain) -> bool:
    for proc in chain.sidecars:
        url = f"http://127.0.0.1:{proc.extra_ports['admin']}/availability?endpoint=GET%20/x"
        if not (await client.get(url)).json()["available"]:
            return False
    return True


async def measure(chain: Chain, trips: int) -> Trips:
    """Run `trips` trips; latencies per hop (0 = s0's own update)."""
    result = Trips({k: [] for k in range(HOPS + 1)})
    arrivals: dict[int, float] = {}
    wake = asyncio.Event()
    watchers = [
        asyncio.create_task(_watch(f"127.0.0.1:{p.extra_ports['grpc']}", k, arrivals, wake))
        for k, p in enumerate(chain.sidecars)
    ]
    s0 = chain.sidecars[0].port
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            await asyncio.sleep(1.0)  # every Watch stream (sidecars' and ours) is up
            for _ in range(trips):
                arrivals.clear()
                wake.clear()
                t0 = time.monotonic()
                request = asyncio.create_task(get(s0, "/leaf/fail"))
                deadline = t0 + 3.0
                while len(arrivals) <= HOPS and time.monotonic() < deadline:
                    wake.clear()
                    try:
                        async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                            await wake.wait()
                    except TimeoutError:
                        break
                await request
                if len(arrivals) <= HOPS:
                    result.lost += 1
                for hop, at in arrivals.items():
                    result.by_hop[hop].append(at - t0)
                await asyncio.sleep(max(t0 + RECOVERY + 0.02 - time.monotonic(), 0.0))
                end = time.monotonic() + 5.0
                while time.monotonic() < end:
                    await get(s0, "/leaf/ok")  # the probe closes the breaker
                    if await _all_available(client, chain):
                        break
                    await asyncio.sleep(0.02)
    finally:
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
    return result
