"""Instructions per closed-path call, counted by callgrind: a measure a busy machine cannot skew.

    .venv/bin/python bench/core/instructions.py                     # this checkout
    .venv/bin/python bench/core/instructions.py --src OTHER/src     # and another tree, same run

Each case runs in a fresh interpreter under `valgrind --tool=callgrind` twice, with N and 2N
iterations; the difference divided by N is the cost of one iteration with start-up cancelled out.
The bare call's cost is subtracted. Wall-clock benchmarks (run.py) stay the headline; this one
answers "did the closed fast path get more expensive?" on a machine shared with other jobs.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]
CASES = {
    "bare fn()": ("", "fn()"),
    "b.call(fn)": ("b = CircuitBreaker('bench')", "b.call(fn)"),
    "@b decorator": ("b = CircuitBreaker('bench'); d = b(fn)", "d()"),
    "with b:": ("b = CircuitBreaker('bench')", "with b:\n    fn()"),
    "bare await afn()": ("", "await afn()"),
    "await b.acall(afn)": ("b = CircuitBreaker('bench')", "await b.acall(afn)"),
    "async with b:": ("b = CircuitBreaker('bench')", "async with b:\n    await afn()"),
    "@b async decorator": ("b = CircuitBreaker('bench'); d = b(afn)", "await d()"),
}
PROGRAM = """
import asyncio, sys
sys.path.insert(0, {src!r})
from cascadebreaker import CircuitBreaker
def fn():
    return 1
async def afn():
    return 1
{setup}
{head} loop(n):
    for _ in range(n):
{body}
n = int(sys.argv[1])
{run}
"""
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def instructions(src: str, setup: str, stmt: str, n: int) -> int:
    """Instructions callgrind counts for one interpreter running `stmt` n times."""
    is_async = "await" in stmt
    program = PROGRAM.format(
        src=src,
        setup=setup,
        head="async def" if is_async else "def",
        body=textwrap.indent(stmt, " " * 8),
        run="asyncio.run(loop(n))" if is_async else "loop(n)",
    )
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-c",
            program,
            str(n),
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    match = _COLLECTED.search(done.stderr)
    if match is None:
        raise RuntimeError(f"no instruction count in callgrind's output: {done.stderr[-500:]}")
    return int(match.group(1))


def per_call(src: str, setup: str, stmt: str, n: int) -> float:
    """Instructions of one iteration (start-up cancelled by running n and 2n)."""
    return (instructions(src, setup, stmt, 2 * n) - instructions(src, setup, stmt, n)) / n


def main(argv: list[str] | None = None) -> int:
    """Print instructions per call over the bare call, for each source tree given."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", action="append", default=[], help="another source tree (src/)")
    parser.add_argument("-n", type=int, default=20_000, help="iterations (the run does n and 2n)")
    parser.add_argument("--case", action="append", default=[], help="only these cases (by name)")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("bench instructions: valgrind is not installed", file=sys.stderr)
        return 1
    trees = [str(HERE / "src"), *args.src]
    wanted = [
        name for name in CASES if not args.case or name in args.case or name.startswith("bare")
    ]
    results: dict[str, dict[str, float]] = {}
    for tree in trees:
        results[tree] = {name: per_call(tree, *CASES[name], args.n) for name in wanted}
    print(f"instructions per call over the bare call (callgrind, n={args.n}):\n")
    print("| case | " + " | ".join(trees) + " |")
    print("|---|" + "--:|" * len(trees))
    for name in wanted:
        if name.startswith("bare"):
            continue
        bare = "bare await afn()" if "await" in CASES[name][1] else "bare fn()"
        cells = [f"{results[t][name] - results[t][bare]:,.0f}" for t in trees]
        print(f"| `{name}` | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
