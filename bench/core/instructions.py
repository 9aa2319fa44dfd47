"""Instructions per closed-path call, counted by callgrind: a measure a busy machine cannot skew.

    .venv/bin/python bench/core/instructions.py                     # this checkout
    .venv/bin/python bench/core/instructions.py --src OTHER/src --label main --write
                                                    # and another tree, same run, into the docs

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
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]
DOC = HERE / "docs" / "benchmarks.md"
SECTION = "## Core library: instructions per call"
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
    parser.add_argument("--label", action="append", default=[], help="a name for each --src")
    parser.add_argument("--write", action="store_true", help="record the table in the docs")
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
    labels = ["this checkout", *args.label, *args.src[len(args.label) :]]
    table = render(results, trees, labels, wanted)
    print(f"instructions per call over the bare call (callgrind, n={args.n}):\n")
    print("\n".join(table))
    if args.write:
        from bench.core.report import write_section

        section = [
            SECTION,
            "",
            "Instructions per closed-path call over the bare call, counted by callgrind (each case",
            "in a fresh interpreter run with n and 2n iterations; the difference over n cancels",
            "start-up). Unlike wall time, this does not move with the machine's load.",
            "",
            f"Rerun: `.venv/bin/python bench/core/instructions.py --src OTHER/src --label NAME "
            f"--write` (n={args.n}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}).",
            "",
            *table,
            "",
        ]
        write_section(DOC, "\n".join(section), SECTION)
        print(f"wrote the '{SECTION}' section of {DOC}")
    return 0


def render(
    results: dict[str, dict[str, float]], trees: list[str], labels: list[str], wanted: list[str]
) -> list[str]:
    """A markdown table: one row per case, one column per tree, and the change vs the first."""
    head = "| case | " + " | ".join(labels) + " |" + (" change |" if len(trees) > 1 else "")
    lines = [head, "|---|" + "--:|" * (len(trees) + (len(trees) > 1))]
    for name in wanted:
        if name.startswith("bare"):
            continue
        bare = "bare await afn()" if "await" in CASES[name][1] else "bare fn()"
        counts = [results[t][name] - results[t][bare] for t in trees]
        cells = [f"{c:,.0f}" for c in counts]
        if len(trees) > 1:
            cells.append(f"{(counts[0] - counts[1]) / counts[1]:+.1%}")
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return lines


if __name__ == "__main__":
    if __package__ in (None, ""):  # run as a script: make `bench.core` importable
        sys.path.insert(0, str(HERE))
    raise SystemExit(main())
