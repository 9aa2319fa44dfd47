"""Propagation through a tree of real sidecar processes: the measured cost of one hop.

s0 guards `leaf` (nginx: `/fail` answers 500; failure_threshold 1). Level l has `fanout`^l
sidecars, each calling one sidecar of level l-1 (a static edge `GET /x -> GET /x` and its
parent's gRPC address in `cascade.peers`, so it subscribes to the parent's Watch stream at
start). One trip: the bench sends `GET /leaf/fail` to s0; the root's breaker opens; every
sidecar's own "GET /x unavailable" update is noted on a Watch stream the bench holds to it
(an upper bound by one delivery). Then the probe closes the breaker and the bench waits until
all are available again. Reports per level: p50/p99 of the time since the trigger, the
per-hop cost (deepest level / depth), and every sidecar's RSS.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from bench.cascade.propagation import LEAF, get
from bench.sidecar.procs import Proc, free_port, start_nginx, start_sidecar
from cascadebreaker.sidecar.grpc.client import watch_updates

RECOVERY = 0.3
SECRET = "bench-fleet-secret"


@dataclass
class Tree:
    leaf: Proc
    sidecars: list[Proc]
    level: list[int]

    def stop(self) -> None:
        for proc in (*self.sidecars, self.leaf):
            proc.stop()


@dataclass
class FleetRun:
    """Seconds since the trigger, per level, over all trips; RSS per sidecar (MB)."""

    by_level: dict[int, list[float]] = field(default_factory=dict)
    lost: int = 0
    rss_mb: list[float] = field(default_factory=list)
    sidecars: int = 0
    depth: int = 0


def start_tree(workdir: Path, fanout: int, depth: int) -> Tree:
    """Start the leaf and the tree of sidecars, level by level (parents first)."""
    port = free_port()
    leaf = start_nginx("fleet-leaf", workdir, LEAF.format(port=port), port)
    sidecars: list[Proc] = []
    level: list[int] = []
    parents: list[int] = []
    for at in range(depth + 1):
        count = fanout**at
        for i in range(count):
            name = f"f{len(sidecars)}"
            if at == 0:
                upstream, edges, peers = (
                    "leaf",
                    [{"caller": f"{name} GET /x", "callee": "leaf GET /x"}],
                    {},
                )
            else:
                parent = sidecars[parents[i // fanout]]
                upstream = parent.name
                edges = [{"caller": f"{name} GET /x", "callee": f"{upstream} GET /x"}]
                peers = {upstream: f"127.0.0.1:{parent.extra_ports['grpc']}"}
            config: dict[str, object] = {
                "service": name,
                "listen": {
                    "outbound": f"127.0.0.1:{free_port()}",
                    "inbound": None,
                    "grpc": f"127.0.0.1:{free_port()}",
                    "admin": f"127.0.0.1:{free_port()}",
                },
                "upstreams": {
                    upstream: {
                        "url": f"http://127.0.0.1:{port}",
                        "breaker": {"failure_threshold": 1, "recovery_timeout": RECOVERY},
                    }
                },
                "cascade": {"secret": SECRET, "edges": edges, "peers": peers},
                "log_level": "warning",
            }
            sidecars.append(start_sidecar(workdir, name, config, f"/{upstream}/"))
            level.append(at)
        parents = [j for j, lv in enumerate(level) if lv == at]
    return Tree(leaf, sidecars, level)


async def _watch(address: str, index: int, arrivals: dict[int, float], wake: asyncio.Event) -> None:
    while True:
        channel = grpc.aio.insecure_channel(address)
        try:
            async for update in watch_updates(channel, "bench"):
                if not update.available and update.endpoint.template == "/x":
                    arrivals.setdefault(index, time.monotonic())
                    wake.set()
        except grpc.aio.AioRpcError:
            await asyncio.sleep(0.05)
        finally:
            await channel.close(None)


async def measure(tree: Tree, trips: int) -> FleetRun:
    """Run `trips` trips over the tree."""
    depth = max(tree.level)
    run = FleetRun({lv: [] for lv in range(depth + 1)}, sidecars=len(tree.sidecars), depth=depth)
    arrivals: dict[int, float] = {}
    wake = asyncio.Event()
    watchers = [
        asyncio.create_task(_watch(f"127.0.0.1:{p.extra_ports['grpc']}", i, arrivals, wake))
        for i, p in enumerate(tree.sidecars)
    ]
    root = tree.sidecars[0].port
    everyone = len(tree.sidecars)
    try:
        await asyncio.sleep(2.0)  # every Watch stream up (the sidecars' and ours)
        for _ in range(trips):
            arrivals.clear()
            t0 = time.monotonic()
            request = asyncio.create_task(get(root, "/leaf/fail"))
            deadline = t0 + 5.0
            while len(arrivals) < everyone and time.monotonic() < deadline:
                wake.clear()
                try:
                    async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                        await wake.wait()
                except TimeoutError:
                    break
            await request
            if len(arrivals) < everyone:
                run.lost += 1
            deepest: dict[int, float] = {}
            for index, at in arrivals.items():
                lv = tree.level[index]
                deepest[lv] = max(deepest.get(lv, 0.0), at - t0)
            for lv, seconds in deepest.items():
                run.by_level[lv].append(seconds)  # the last sidecar of the level to know
            await asyncio.sleep(RECOVERY + 0.05)
            end = time.monotonic() + 10.0
            while time.monotonic() < end:
                await get(root, "/leaf/ok")  # the probe closes the breaker; all recover
                arrivals.clear()
                await asyncio.sleep(0.3)
                if not arrivals:  # no sidecar said "unavailable" again: quiet
                    break
    finally:
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
    run.rss_mb = [p.rss_mb() for p in tree.sidecars]
    return run
