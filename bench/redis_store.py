"""RedisStore per-call cost against pybreaker's CircuitRedisStorage, plus trip visibility.

    .venv/bin/python bench/redis_store.py          # prints a table (not a test)
    .venv/bin/python bench/redis_store.py --quick

Every case runs on one throwaway redis-server (loopback, free port). Cases are timed in
interleaved rounds with the GC off; a row shows the best and the median round, in ns per call
over the bare call of the same shape. "1% failures" rows call a function that raises once every
100 calls (the failure is caught by the loop), so batched background reporting is included.
Visibility: two RedisStores in this process, the time from a trip in one to the other's listener.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pybreaker
import redis

from bench.core.redis_mode import redis_server
from cascadebreaker import CircuitBreaker, MemoryStore, RedisStore, State


class Flaky:
    """Raises once every 100 calls."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> int:
        self.n += 1
        if self.n % 100 == 0:
            raise LookupError("flaky")
        return self.n


def ok() -> int:
    return 1


async def aok() -> int:
    return 1


def sync_loop(call: Callable[[], Any]) -> Callable[[int], float]:
    def run(n: int) -> float:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            try:  # noqa: SIM105 - suppress() would add a context manager to every call timed
                call()
            except LookupError:
                pass
        return (time.perf_counter_ns() - t0) / n

    return run


def async_loop(call: Callable[[], Any], loop: asyncio.AbstractEventLoop) -> Callable[[int], float]:
    async def body(n: int) -> float:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            await call()
        return (time.perf_counter_ns() - t0) / n

    return lambda n: loop.run_until_complete(body(n))


def measure(
    cases: dict[str, tuple[Callable[[int], float], int]], rounds: int
) -> dict[str, list[float]]:
    """Run every case once per round, interleaved; ns per call for each round."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (run, n) in cases.items():
            gc.collect()
            gc.disable()
            try:
                samples[name].append(run(n))
            finally:
                gc.enable()
    return samples


def visibility(url: str, namespace: str, trips: int) -> list[float]:
    """Seconds from a trip in one store to the other store's listener, `trips` times."""
    a_store = RedisStore.from_url(url, namespace=namespace)
    b_store = RedisStore.from_url(url, namespace=namespace)
    try:
        a_store.wait_ready()
        b_store.wait_ready()
        a = CircuitBreaker("vis", failure_threshold=1, store=a_store)
        b = CircuitBreaker("vis", failure_threshold=1, store=b_store)
        seen = threading.Event()
        b.add_listener(lambda e: seen.set() if e.to_state is State.OPEN else None)
        delays = []
        for _ in range(trips):
            seen.clear()
            t0 = time.perf_counter()
            with contextlib.suppress(ZeroDivisionError):
                a.call(lambda: 1 / 0)
            if not seen.wait(5.0):
                raise RuntimeError("trip not seen within 5 s")
            delays.append(time.perf_counter() - t0)
            a.reset()
            deadline = time.monotonic() + 5.0
            while b.state is not State.CLOSED and time.monotonic() < deadline:
                time.sleep(0.0005)
        return delays
    finally:
        a_store.close()
        b_store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args()
    rounds = 3 if args.quick else 7
    n_fast, n_slow = (50_000, 300) if args.quick else (200_000, 1_000)
    loop = asyncio.new_event_loop()
    with redis_server() as url:
        store = RedisStore.from_url(url, namespace="bench")
        store.wait_ready()
        ours = CircuitBreaker("bench", failure_threshold=1_000_000, store=store)
        ours_flaky = CircuitBreaker("bench-flaky", failure_threshold=1_000_000, store=store)
        memory = CircuitBreaker("bench", failure_threshold=1_000_000, store=MemoryStore())
        memory_flaky = CircuitBreaker("flaky", failure_threshold=1_000_000, store=MemoryStore())
        client = redis.Redis.from_url(url)
        storage = pybreaker.CircuitRedisStorage(pybreaker.STATE_CLOSED, client, namespace="pb")
        pb = pybreaker.CircuitBreaker(fail_max=1_000_000, reset_timeout=30, state_storage=storage)
        flaky_pb, flaky_ours, flaky_mem, flaky_bare = Flaky(), Flaky(), Flaky(), Flaky()
        cases = {
            # Every case calls through one lambda, so the bare rows carry the same loop overhead.
            "bare fn()": (sync_loop(lambda: ok()), n_fast),
            "bare fn() 1% failures": (sync_loop(lambda: flaky_bare()), n_fast),
            "bare await afn()": (async_loop(lambda: aok(), loop), n_fast),
            "MemoryStore b.call(fn)": (sync_loop(lambda: memory.call(ok)), n_fast),
            "RedisStore b.call(fn)": (sync_loop(lambda: ours.call(ok)), n_fast),
            "RedisStore await b.acall(afn)": (async_loop(lambda: ours.acall(aok), loop), n_fast),
            "MemoryStore b.call(fn) 1% failures": (
                sync_loop(lambda: memory_flaky.call(flaky_mem)),
                n_fast,
            ),
            "RedisStore b.call(fn) 1% failures": (
                sync_loop(lambda: ours_flaky.call(flaky_ours)),
                n_fast,
            ),
            "pybreaker CircuitRedisStorage pb.call(fn)": (sync_loop(lambda: pb.call(ok)), n_slow),
            "pybreaker CircuitRedisStorage 1% failures": (
                sync_loop(lambda: pb.call(flaky_pb)),
                n_slow,
            ),
        }
        samples = measure(cases, rounds)
        delays = visibility(url, "bench-vis", 50 if args.quick else 200)
        dropped = store.dropped
        store.close()
        client.close()
    loop.close()
    print_table(samples, delays, dropped)
    return 0


def bare_for(name: str) -> str:
    if "acall" in name:
        return "bare await afn()"
    return "bare fn() 1% failures" if "1% failures" in name else "bare fn()"


def print_table(samples: dict[str, list[float]], delays: list[float], dropped: int) -> None:
    best = {name: min(s) for name, s in samples.items()}
    median = {name: statistics.median(s) for name, s in samples.items()}
    pb_best = best["pybreaker CircuitRedisStorage pb.call(fn)"] - best["bare fn()"]
    print(f"{'case':45} {'best ns':>10} {'median ns':>10} {'vs pybreaker':>13}")
    print("-" * 81)
    for name in samples:
        if name.startswith("bare"):
            print(f"{name:45} {best[name]:>10,.0f} {median[name]:>10,.0f} {'(baseline)':>13}")
            continue
        bare = bare_for(name)
        over_best = best[name] - best[bare]
        over_median = median[name] - median[bare]
        ratio = f"{pb_best / max(over_best, 1.0):,.0f}x" if "pybreaker" not in name else ""
        print(f"{name:45} {over_best:>10,.0f} {over_median:>10,.0f} {ratio:>13}")
    cuts = statistics.quantiles(delays, n=100, method="inclusive")
    print()
    print(
        f"trip visibility, store A -> store B in one process (n={len(delays)}): "
        f"p50 {cuts[49] * 1e3:.2f} ms, p99 {cuts[98] * 1e3:.2f} ms, max {max(delays) * 1e3:.2f} ms"
    )
    print(f"background messages dropped: {dropped}")


if __name__ == "__main__":
    sys.exit(main())
