"""The benchmark cases: one closed-circuit call through each library, sync and async.

Every case is a statement run in a tight loop around the same trivial function (`fn()` returns 1,
`afn()` is a coroutine returning 1). Every breaker is configured alike where the library allows:
trip after 5 consecutive failures, 30 s open. A library that cannot be imported, or that has no
form for a mode, yields an `Unavailable` row instead of a number.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

Mode = Literal["sync", "async"]
OURS = "cascadebreaker"


def fn() -> int:
    """The bare sync call every case wraps."""
    return 1


async def afn() -> int:
    """The bare coroutine every async case wraps (never suspends)."""
    return 1


@dataclass
class Case:
    """One way of calling `fn`/`afn` through a breaker."""

    library: str
    form: str
    mode: Mode
    stmt: str  # the loop body; may use the names in `env`
    env: dict[str, Any] = field(default_factory=dict)
    note: str = ""


@dataclass
class Unavailable:
    """A library/mode with no number, and why."""

    library: str
    form: str
    mode: Mode
    reason: str


Built = list[Case | Unavailable]


def version(dist: str) -> str:
    """Installed version of a distribution, or '-'."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def bare() -> Built:
    return [
        Case("bare call", "fn()", "sync", "fn()"),
        Case("bare call", "await afn()", "async", "await afn()"),
    ]


def cascadebreaker_cases() -> Built:
    from cascadebreaker import CircuitBreaker

    b = CircuitBreaker("bench", failure_threshold=5, recovery_timeout=30.0)
    env = {"b": b, "dfn": b(fn), "dafn": b(afn)}
    return [
        Case(OURS, "b.call(fn)", "sync", "b.call(fn)", env),
        Case(OURS, "@b decorator", "sync", "dfn()", env),
        Case(OURS, "with b:", "sync", "with b:\n    fn()", env),
        Case(OURS, "await b.acall(afn)", "async", "await b.acall(afn)", env),
        Case(OURS, "@b decorator", "async", "await dafn()", env),
        Case(OURS, "async with b:", "async", "async with b:\n    await afn()", env),
    ]


def pybreaker_cases() -> Built:
    import pybreaker

    b = pybreaker.CircuitBreaker(fail_max=5, reset_timeout=30)
    env = {"pb": b, "dfn": b(fn)}
    return [
        Case("pybreaker", "pb.call(fn)", "sync", "pb.call(fn)", env),
        Case("pybreaker", "@pb decorator", "sync", "dfn()", env),
        Unavailable("pybreaker", "call_async", "async", "async needs Tornado coroutines"),
    ]


def circuitbreaker_cases() -> Built:
    import circuitbreaker

    b = circuitbreaker.CircuitBreaker(failure_threshold=5, recovery_timeout=30, name="bench")
    env = {"cb": b, "dfn": b(fn), "dafn": b(afn)}
    return [
        Case("circuitbreaker", "cb.call(fn)", "sync", "cb.call(fn)", env),
        Case("circuitbreaker", "@circuit decorator", "sync", "dfn()", env),
        Case(
            "circuitbreaker", "await cb.call_async(afn)", "async", "await cb.call_async(afn)", env
        ),
        Case("circuitbreaker", "@circuit decorator", "async", "await dafn()", env),
    ]


def aiobreaker_cases() -> Built:
    import aiobreaker

    b = aiobreaker.CircuitBreaker(fail_max=5, timeout_duration=timedelta(seconds=30))
    env = {"ab": b, "dfn": b(fn), "dafn": b(afn)}
    return [
        Case("aiobreaker", "ab.call(fn)", "sync", "ab.call(fn)", env),
        Case("aiobreaker", "@ab decorator", "sync", "dfn()", env),
        Case("aiobreaker", "await ab.call_async(afn)", "async", "await ab.call_async(afn)", env),
        Case("aiobreaker", "@ab decorator", "async", "await dafn()", env),
    ]


def purgatory_cases() -> Built:
    from purgatory import AsyncCircuitBreakerFactory, SyncCircuitBreakerFactory

    sync_factory = SyncCircuitBreakerFactory(default_threshold=5, default_ttl=30)
    async_factory = AsyncCircuitBreakerFactory(default_threshold=5, default_ttl=30)
    brk = sync_factory.get_breaker("bench")
    abrk = asyncio.run(async_factory.get_breaker("bench"))
    env = {
        "brk": brk,
        "abrk": abrk,
        "dfn": sync_factory("bench")(fn),
        "dafn": async_factory("bench")(afn),
    }
    return [
        Case("purgatory", "with brk: (breaker fetched once)", "sync", "with brk:\n    fn()", env),
        Case("purgatory", "@factory decorator", "sync", "dfn()", env),
        Case(
            "purgatory",
            "async with brk: (fetched once)",
            "async",
            "async with abrk:\n    await afn()",
            env,
        ),
        Case("purgatory", "@factory decorator", "async", "await dafn()", env),
    ]


def interlock_cases() -> Built:
    import interlock

    b = interlock.CircuitBreaker(name="bench")
    env = {"ib": b, "dfn": b(fn), "dafn": b(afn)}
    note = "default config: failure rate over a window (resilience4j defaults)"
    return [
        Case("interlock-cb", "ib.call(fn)", "sync", "ib.call(fn)", env, note),
        Case("interlock-cb", "@ib decorator", "sync", "dfn()", env, note),
        Case("interlock-cb", "await ib.call(afn)", "async", "await ib.call(afn)", env, note),
        Case("interlock-cb", "@ib decorator", "async", "await dafn()", env, note),
    ]


LIBRARIES: list[tuple[str, str, Callable[[], Built]]] = [
    (OURS, "cascadebreaker", cascadebreaker_cases),
    ("pybreaker", "pybreaker", pybreaker_cases),
    ("circuitbreaker", "circuitbreaker", circuitbreaker_cases),
    ("aiobreaker", "aiobreaker", aiobreaker_cases),
    ("purgatory", "purgatory", purgatory_cases),
    ("interlock-cb", "interlock-cb", interlock_cases),
]


def all_cases() -> Built:
    """Bare calls first, then every library's cases (or why a library has none)."""
    built = bare()
    for library, _dist, build in LIBRARIES:
        try:
            built.extend(build())
        except Exception as exc:  # a peer that fails to import or build still gets a row
            reason = f"{type(exc).__name__}: {exc}"
            built.append(Unavailable(library, "-", "sync", reason))
            built.append(Unavailable(library, "-", "async", reason))
    return built
