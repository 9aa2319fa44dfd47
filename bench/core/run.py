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
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench.core` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.core.cases import LIBRARIES, OURS, Unavailable, all_cases, version
from bench.core.redis_mode import RedisRow, run_redis_mode
from bench.core.report import render_markdown, render_rich, write_section
from bench.core.timing import Timed, measure, prepare

TARGET_NS = {"sync": 300.0, "async": 600.0}
DOC = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"


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
    parser.add_argument("--no-redis", action="store_true", help="skip the Redis-mode comparison")
    parser.add_argument("--doc", type=Path, default=DOC, help="markdown file to update")
    # `python -m bench -- ARGS` hands the same ARGS to every suite: skip what is not ours.
    args, ignored = parser.parse_known_args(argv)
    if ignored:
        print(f"bench core: ignoring {' '.join(ignored)}")
    if args.quick:
        args.repeats, args.round_ms, args.no_write = 3, 10.0, True

    built = all_cases()
    missing = [item for item in built if isinstance(item, Unavailable)]
    timed, failed = prepare([item for item in built if not isinstance(item, Unavailable)])
    missing += [Unavailable(c.library, c.form, c.mode, reason) for c, reason in failed]
    measure(timed, args.repeats, args.round_ms)
    rows = build_rows(timed, missing)
    env = environment(timed, args.repeats)
    redis_rows: list[RedisRow] = []
    if not args.no_redis:
        try:
            redis_rows = run_redis_mode(max(3, args.repeats // 2), args.round_ms * 2)
        except RuntimeError as exc:  # no redis-server on this machine: say so in the table
            redis_rows = [RedisRow(OURS, version(OURS), "RedisStore", "sync", note=str(exc))]
    render_rich(rows, env, TARGET_NS, redis_rows)
    if not args.no_write:
        write_section(args.doc, render_markdown(rows, env, TARGET_NS, redis_rows))
        print(f"wrote the '## Core library' section of {args.doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
