"""Timing machinery shared by the core benchmarks: compiled tight loops, interleaved rounds."""

from __future__ import annotations

import asyncio
import gc
import statistics
import textwrap
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from bench.core.cases import Case, afn, fn

Runner = Callable[[int], int] | Callable[[int], Coroutine[Any, Any, int]]


@dataclass
class Timed:
    """A case and its per-call samples (ns, bare call included)."""

    case: Case
    runner: Runner
    iterations: int = 0
    samples: list[float] = field(default_factory=list)

    @property
    def best(self) -> float:
        return min(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


def compile_runner(case: Case) -> Runner:
    """Compile `case.stmt` into `_run(n) -> elapsed ns` (async def for async cases)."""
    body = textwrap.indent(case.stmt, " " * 8)
    head = "async def" if case.mode == "async" else "def"
    source = (
        f"{head} _run(_n):\n"
        f"    _t0 = _clock()\n"
        f"    for _ in _range(_n):\n{body}\n"
        f"    return _clock() - _t0\n"
    )
    namespace: dict[str, Any] = {"fn": fn, "afn": afn, **case.env}
    namespace.update(_clock=time.perf_counter_ns, _range=range)
    exec(compile(source, f"<bench {case.library} {case.form}>", "exec"), namespace)
    runner: Runner = namespace["_run"]
    return runner


def run_once(timed: Timed, n: int, loop: asyncio.AbstractEventLoop) -> int:
    """Run `n` iterations with the GC off; elapsed ns."""
    gc.collect()
    gc.disable()
    try:
        if timed.case.mode == "async":
            return loop.run_until_complete(timed.runner(n))  # type: ignore[arg-type]
        return timed.runner(n)  # type: ignore[return-value]
    finally:
        gc.enable()


def measure(timed: list[Timed], repeats: int, round_ms: float, min_iterations: int = 5_000) -> None:
    """Calibrate each case to ~round_ms per round, then time `repeats` interleaved rounds."""
    loop = asyncio.new_event_loop()
    try:
        for t in timed:
            probe = max(min_iterations // 2, 10)
            run_once(t, probe, loop)  # warm-up (and a check that the case runs at all)
            per_call = max(run_once(t, probe, loop) / probe, 1.0)
            t.iterations = max(min_iterations, int(round_ms * 1e6 / per_call))
        for _ in range(repeats):
            for t in timed:
                t.samples.append(run_once(t, t.iterations, loop) / t.iterations)
    finally:
        loop.close()


def prepare(cases: list[Case]) -> tuple[list[Timed], list[tuple[Case, str]]]:
    """Compile every case and run it briefly; cases that fail come back with the reason."""
    timed: list[Timed] = []
    failed: list[tuple[Case, str]] = []
    for case in cases:
        try:
            t = Timed(case, compile_runner(case))
            measure([t], 1, 1.0, min_iterations=20)
            t.samples.clear()
            timed.append(t)
        except Exception as exc:
            failed.append((case, f"failed: {exc!r}"))
    return timed, failed
