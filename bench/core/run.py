"""Closed-path overhead per call: cascadebreaker against its peers, sync and async, in one run.

    .venv/bin/python bench/core/run.py            # full run, writes docs/benchmarks.md
    .venv/bin/python bench/core/run.py --quick    # a short run, prints only

Method: every case is a statement compiled into its own tight `for` loop (no extra call layer),
timed with `time.perf_counter_ns` with the garbage collector off. Cases are interleaved round by
round, so a noisy neighbour slows every case alike; each case's ns/call is the best (and the
median) of the rounds, minus the bare call's best (median) from the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import statistics
import sys
import textwrap
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench.core` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.core.cases import LIBRARIES, OURS, Case, Unavailable, afn, all_cases, fn, version
from bench.core.report import render_markdown, render_rich, write_section

TARGET_NS = {"sync": 300.0, "async": 600.0}
DOC = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
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


def measure(timed: list[Timed], repeats: int, round_ms: float) -> None:
    """Calibrate each case to ~round_ms per round, then time `repeats` interleaved rounds."""
    loop = asyncio.new_event_loop()
    try:
        for t in timed:
            run_once(t, 2_000, loop)  # warm-up (and a check that the case runs at all)
            per_call = max(run_once(t, 5_000, loop) / 5_000, 1.0)
            t.iterations = max(5_000, int(round_ms * 1e6 / per_call))
        for _ in range(repeats):
            for t in timed:
                t.samples.append(run_once(t, t.iterations, loop) / t.iterations)
    finally:
        loop.close()


@dataclass
class Row:
    """One line of the result table."""

    library: str
    version: str
    form: str
    mode: str
    over_best: float | None = None
    over_median: float | None = None
    ratio: float | None = None
    note: str = ""


def build_rows(timed: list[Timed], missing: list[Unavailable]) -> list[Row]:
    """Subtract the bare call and compare with the fastest peer of each mode."""
    versions = {library: version(dist) for library, dist, _ in LIBRARIES}
    bare = {t.case.mode: t for t in timed if t.case.library == "bare call"}
    rows: list[Row] = []
    for t in timed:
        if t.case.library == "bare call":
            continue
        base = bare[t.case.mode]
        rows.append(
            Row(
                t.case.library,
                versions.get(t.case.library, "-"),
                t.case.form,
                t.case.mode,
                t.best - base.best,
                t.median - base.median,
                note=t.case.note,
            )
        )
    for u in missing:
        rows.append(Row(u.library, versions.get(u.library, "-"), u.form, u.mode, note=u.reason))
    for mode in ("sync", "async"):
        peers = [r.over_best for r in rows if r.mode == mode and r.library != OURS]
        fastest = min((p for p in peers if p is not None), default=None)
        for r in rows:
            if r.mode == mode and r.over_best is not None and fastest:
                r.ratio = r.over_best / fastest
    rows.sort(key=lambda r: (r.mode != "sync", r.over_best is None, r.over_best or 0.0))
    return rows


def environment(timed: list[Timed], repeats: int) -> dict[str, str]:
    """What the numbers were measured on."""
    bare = {t.case.mode: t.best for t in timed if t.case.library == "bare call"}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, load average {load:.2f}",
        "repeats": str(repeats),
        "bare": f"fn() {bare.get('sync', 0):.0f} ns, await afn() {bare.get('async', 0):.0f} ns",
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table, and record it in docs/benchmarks.md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9, help="interleaved rounds per case")
    parser.add_argument("--round-ms", type=float, default=40.0, help="target ms per round")
    parser.add_argument("--quick", action="store_true", help="3 rounds of 10 ms; no doc write")
    parser.add_argument("--no-write", action="store_true", help="do not touch docs/benchmarks.md")
    parser.add_argument("--doc", type=Path, default=DOC, help="markdown file to update")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.round_ms, args.no_write = 3, 10.0, True

    built = all_cases()
    timed: list[Timed] = []
    missing: list[Unavailable] = []
    for item in built:
        if isinstance(item, Unavailable):
            missing.append(item)
            continue
        try:
            t = Timed(item, compile_runner(item))
            measure([t], 1, 1.0)  # smoke: the case runs; the sample is discarded
            t.samples.clear()
            timed.append(t)
        except Exception as exc:
            missing.append(Unavailable(item.library, item.form, item.mode, f"failed: {exc!r}"))
    measure(timed, args.repeats, args.round_ms)
    rows = build_rows(timed, missing)
    env = environment(timed, args.repeats)
    render_rich(rows, env, TARGET_NS)
    if not args.no_write:
        write_section(args.doc, render_markdown(rows, env, TARGET_NS))
        print(f"wrote the '## Core library' section of {args.doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
