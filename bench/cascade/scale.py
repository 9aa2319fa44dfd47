"""The cost of one change at fleet scale: an in-process model with the real rules and codec.

Graph: `n` services in `depth` layers (layer 0 = leaves). A service of layer L > 0 calls k
upstreams from the layers below, k drawn from a power law (Pareto, alpha 1.5, capped at 12),
each upstream picked by preferential attachment (weight 1 + its callers so far), so fan-in is
power-law too: a few services are called by hundreds. Each service has two endpoints; each
endpoint of a caller requires one endpoint of each of its upstreams (learned by the caller's
table, as its sidecar would).

One change: a service's breaker for one of its upstreams opens (`breaker_opened`). Its updates
travel to other sidecars by the rules of each bus:

- watch: to the services that call the sender (their sidecars subscribed to its Watch stream);
- nats:  to the sender's subject, i.e. its dependents (and siblings; one replica here);
- redis: one channel per namespace: to every other sidecar of the fleet.

Every delivery a dependent gets is decoded (protobuf for Watch, JSON for the others) and fed to
its real `AvailabilityTable.receive` (HMAC verify, aggregate, derive, sign what changes), timed
with `perf_counter`. Deliveries to sidecars that do not call the sender (Redis) are decoded and
dropped (the sidecar keeps only its upstreams' updates): they are counted, and their CPU is the
measured mean of such a decode times their number (the model does not run every one at 10,000
services).

Time: a discrete-event simulation. A delivery arrives `hop_ms` after it is sent (measured by the
multi-process run, `fleet.py`, or given); a sidecar processes one message at a time, for the
measured duration of its receive; what it sends leaves when it is done. "Time to the last
dependent" is when the last table whose check of the changed endpoint's dependents flipped got
there.
"""

from __future__ import annotations

import gc
import heapq
import random
import time
import tracemalloc
from collections import defaultdict
from dataclasses import dataclass, field
from statistics import mean

from cascadebreaker.cascade import AvailabilityTable, AvailabilityUpdate, DependencyGraph, Endpoint
from cascadebreaker.sidecar.grpc.messages import update_from_proto, update_to_proto
from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2 as pb

SECRET = b"bench-scale-secret"
BUSES = ("watch", "nats", "redis")
ENDPOINTS = ("GET /read", "POST /write")


@dataclass
class Fleet:
    """Services, their layers, who calls whom, and one real table per service."""

    layer: dict[str, int]
    upstreams: dict[str, list[str]]
    callers: dict[str, set[str]]
    tables: dict[str, AvailabilityTable]

    @property
    def size(self) -> int:
        return len(self.layer)


class _Clock:
    """One monotonic and wall clock for every table (the model's time does not move)."""

    def __init__(self) -> None:
        self.mono = 1000.0

    def __call__(self) -> float:
        return self.mono

    def wall(self) -> float:
        return 1_764_000_000.0 + self.mono


def build(n: int, depth: int, seed: int) -> Fleet:
    """A power-law dependency graph of `n` services with real tables (edges learned)."""
    rng = random.Random(seed)
    layers = min(depth, n)
    names = [f"s{i}" for i in range(n)]
    layer = {name: (i if i < layers else rng.randrange(layers)) for i, name in enumerate(names)}
    by_layer: dict[int, list[str]] = defaultdict(list)
    for name, at in layer.items():
        by_layer[at].append(name)
    upstreams: dict[str, list[str]] = {name: [] for name in names}
    callers: dict[str, set[str]] = {name: set() for name in names}
    below: list[str] = []
    for at in range(layers):
        if at > 0 and below:
            # Preferential attachment, weights fixed per layer: 1 + callers so far.
            cum: list[float] = []
            total = 0.0
            for name in below:
                total += 1 + len(callers[name])
                cum.append(total)
            for name in by_layer[at]:
                k = min(12, int(rng.paretovariate(1.5)), len(below))
                chosen: set[str] = set()
                while len(chosen) < k:
                    chosen.update(rng.choices(below, cum_weights=cum, k=k - len(chosen)))
                for upstream in sorted(chosen):
                    upstreams[name].append(upstream)
                    callers[upstream].add(name)
        below.extend(by_layer[at])
    clock = _Clock()
    tables = {name: _table(name, clock) for name in names}
    for name in names:
        _learn(tables[name], name, upstreams[name])
    return Fleet(layer, upstreams, callers, tables)


def _table(name: str, clock: _Clock) -> AvailabilityTable:
    return AvailabilityTable(
        name,
        DependencyGraph(clock, edge_ttl=1e9),
        clock=clock,
        wall_clock=clock.wall,
        secret=SECRET,
        instance=f"{name}-0",
    )


def _learn(table: AvailabilityTable, name: str, upstreams: list[str]) -> None:
    """Each endpoint of `name` requires one endpoint of each upstream (as its sidecar learns)."""
    for up in upstreams:
        for i, text in enumerate(ENDPOINTS):
            method, path = text.split(" ")
            callee = ENDPOINTS[(i + int(up[1:])) % len(ENDPOINTS)].split(" ")
            table.learn(Endpoint(name, method, path), Endpoint(up, callee[0], callee[1]))


@dataclass
class ChangeCost:
    """What one change cost on one bus."""

    messages: int = 0  # deliveries to sidecars
    bytes: int = 0
    useful: int = 0  # deliveries to sidecars that depend on the sender
    last_dependent_ms: float = 0.0
    dependents_flipped: int = 0
    cpu_ms: float = 0.0  # receive CPU summed over the fleet (useless deliveries included)


@dataclass
class ScaleResult:
    """Per size and bus: the costs of every sampled change, plus memory."""

    size: int
    edges: int
    max_fan_in: int
    costs: dict[str, list[ChangeCost]] = field(default_factory=dict)
    bytes_per_sidecar: float = 0.0
    max_bytes_per_sidecar: float = 0.0
    mean_deps_per_sidecar: float = 0.0
    build_s: float = 0.0
    mean_useless_receive_us: float = 0.0


def _encode(update: AvailabilityUpdate, bus: str) -> bytes:
    if bus == "watch":
        return bytes(update_to_proto(update).SerializeToString())
    return update.to_json()


def _decode(raw: bytes, bus: str) -> AvailabilityUpdate:
    if bus == "watch":
        message = pb.AvailabilityUpdate()
        message.ParseFromString(raw)
        return update_from_proto(message)
    return AvailabilityUpdate.from_json(raw)


def _useless_receive_us(fleet: Fleet, sample: AvailabilityUpdate, rounds: int = 200) -> float:
    """What a sidecar that does not call the sender spends on one Redis delivery: the decode,
    then the look-up that drops it (`CascadeNode._from_shared_bus`)."""
    upstreams = set(fleet.upstreams[next(iter(fleet.tables))])
    raw = sample.to_json()
    started = time.perf_counter()
    dropped = 0
    for _ in range(rounds):
        dropped += AvailabilityUpdate.from_json(raw).service not in upstreams
    return (time.perf_counter() - started) / max(dropped, 1) * 1e6


def one_change(
    fleet: Fleet, root: str, upstream: str, bus: str, hop_ms: float, useless_us: float
) -> ChangeCost:
    """Open `root`'s breaker for `upstream`, deliver by `bus`'s rules until quiet; reset."""
    cost = ChangeCost()
    tables = fleet.tables
    busy: dict[str, float] = defaultdict(float)
    queue: list[tuple[float, int, str, bytes]] = []  # (arrival ms, seq, receiver, raw)
    seq = 0
    n = fleet.size

    def send(sender: str, updates: tuple[AvailabilityUpdate, ...], at: float) -> None:
        nonlocal seq
        for update in updates:
            raw = _encode(update, bus)
            dependents = fleet.callers[sender]
            for receiver in sorted(dependents):
                seq += 1
                heapq.heappush(queue, (at + hop_ms, seq, receiver, raw))
            cost.messages += len(dependents)
            cost.bytes += len(raw) * len(dependents)
            if bus == "redis":  # everyone else on the channel hears it and drops it
                others = n - 1 - len(dependents)
                cost.messages += others
                cost.bytes += len(raw) * others
                cost.cpu_ms += others * useless_us / 1000
            if bus != "watch":
                cost.bytes += len(raw)  # the publish to the server

    started = time.perf_counter()
    first = tables[root].breaker_opened(upstream, 30.0)
    send(root, first, (time.perf_counter() - started) * 1000)
    while queue:
        arrival, _, receiver, raw = heapq.heappop(queue)
        start = max(arrival, busy[receiver])
        t0 = time.perf_counter()
        update = _decode(raw, bus)
        table = tables[receiver]
        result = table.receive(update)
        spent = (time.perf_counter() - t0) * 1000
        cost.cpu_ms += spent
        cost.useful += 1
        busy[receiver] = done = start + spent
        if result.updates:
            cost.dependents_flipped += 1
            cost.last_dependent_ms = max(cost.last_dependent_ms, done)
            send(receiver, result.updates, done)
        elif table.check(update.endpoint) is not None:
            cost.last_dependent_ms = max(cost.last_dependent_ms, done)
    # Back to healthy for the next change (not measured): recoveries flow the same way.
    recovery = tables[root].breaker_recovered(upstream)
    pending = [(root, u) for u in recovery]
    while pending:
        sender, update = pending.pop()
        for receiver in fleet.callers[sender]:
            for out in tables[receiver].receive(update).updates:
                pending.append((receiver, out))
    return cost


def measure_size(
    n: int, depth: int, changes: int, hop_ms: float, seed: int = 7, buses: tuple[str, ...] = BUSES
) -> ScaleResult:
    """Build a fleet of `n` and run `changes` changes on every bus."""
    gc.collect()
    tracemalloc.start()
    t0 = time.perf_counter()
    before = tracemalloc.get_traced_memory()[0]
    fleet = build(n, depth, seed)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    build_s = time.perf_counter() - t0
    edges = sum(len(u) for u in fleet.upstreams.values())
    result = ScaleResult(
        size=n,
        edges=edges,
        max_fan_in=max(len(c) for c in fleet.callers.values()),
        bytes_per_sidecar=(after - before) / n,
        mean_deps_per_sidecar=edges / n,
        build_s=build_s,
    )
    result.max_bytes_per_sidecar = _biggest_table_bytes(fleet)
    rng = random.Random(seed + 1)
    # Roots: services with an upstream and at least one caller (a change someone must hear).
    candidates = [s for s in fleet.tables if fleet.upstreams[s] and fleet.callers[s]]
    picks = [rng.choice(candidates) for _ in range(changes)] if candidates else []
    if picks:  # and the worst one: the service most others depend on, directly or not
        picks[0] = max(candidates, key=lambda s: _transitive_callers(fleet, s))
    sample = fleet.tables[picks[0]].breaker_opened(fleet.upstreams[picks[0]][0], 30.0)[0]
    fleet.tables[picks[0]].breaker_recovered(fleet.upstreams[picks[0]][0])
    result.mean_useless_receive_us = _useless_receive_us(fleet, sample)
    for bus in buses:
        result.costs[bus] = [
            one_change(
                fleet,
                root,
                rng.choice(fleet.upstreams[root]),
                bus,
                hop_ms,
                result.mean_useless_receive_us,
            )
            for root in picks
        ]
    return result


def _transitive_callers(fleet: Fleet, service: str) -> int:
    seen: set[str] = set()
    stack = [service]
    while stack:
        for caller in fleet.callers[stack.pop()]:
            if caller not in seen:
                seen.add(caller)
                stack.append(caller)
    return len(seen)


def _biggest_table_bytes(fleet: Fleet) -> float:
    """Memory of the table of the sidecar with the most dependencies, rebuilt alone under
    tracemalloc: its share of the graph is its own edges (callers cost it nothing)."""
    name = max(fleet.tables, key=lambda s: len(fleet.upstreams[s]))
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    table = _table(name, _Clock())
    _learn(table, name, fleet.upstreams[name])
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del table
    return float(after - before)


def summarize(costs: list[ChangeCost]) -> dict[str, float]:
    """Per change: mean messages, bytes, useful share; p50/p99 of time to last dependent."""
    if not costs:
        return {}
    times = sorted(c.last_dependent_ms for c in costs)

    def pct(q: float) -> float:
        return times[min(len(times) - 1, int(q * len(times)))]

    return {
        "messages": mean(c.messages for c in costs),
        "max_messages": max(c.messages for c in costs),
        "bytes": mean(c.bytes for c in costs),
        "useful": mean(c.useful for c in costs),
        "flipped": mean(c.dependents_flipped for c in costs),
        "p50_ms": pct(0.5),
        "p99_ms": pct(0.99),
        "cpu_ms": mean(c.cpu_ms for c in costs),
    }
