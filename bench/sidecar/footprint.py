"""Code footprint per request: how much distinct machine code a proxied request runs.

    .venv/bin/python -m bench.sidecar.footprint --src TREE [--floor httptools] [-n 1000]

At a fixed 1000 rps every request meets caches gone cold while the process slept, so what a
request costs depends on how much code and data it touches as much as on its instructions.
This runs the same callgrind window as `bench.sidecar.callprofile` (N requests on one
keep-alive connection, warm-up left out) with `--dump-instr=yes` and counts, by the object the
code lives in, the distinct 64-byte lines and 4 KiB pages of code executed in the window. Every
request takes the same path, so that is one request's code footprint (what L1i, L2 and the
iTLB must hold, or fetch again after a sleep). Only code run at least once every two
requests counts: timers and rare branches that also ran in the window are left out.
Instructions are per request.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench.sidecar` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.sidecar import callprofile

LINE, PAGE = 64, 4096
_NAMED = re.compile(r"^(ob|fl|fi|fe|fn|cob|cfi|cfl|cfn)=\((\d+)\)(?: (.*))?$")


@dataclass(frozen=True)
class Footprint:
    """One object's share: instructions per request, distinct code lines and pages run."""

    group: str
    instructions: float
    lines: int
    pages: int


def group_of(obj: str) -> str:
    """The layer an object file belongs to (callprofile.GROUPS), else `other`."""
    for name, marks in callprofile.GROUPS:
        if any(mark in obj for mark in marks):
            return name
    return "other"


def _number(text: str) -> int:
    """A callgrind number: hex with 0x, else decimal."""
    return int(text, 16) if text.startswith("0x") else int(text)


def parse(out: Path) -> dict[tuple[str, str], tuple[float, dict[int, int]]]:
    """Instructions, and how often each code address ran, by (object, function), from a
    callgrind output file written with `--dump-instr=yes` (positions `instr line`; names and
    addresses compressed). With the one event Ir, an instruction's cost is how often it ran."""
    objects: dict[str, str] = {}
    functions: dict[str, str] = {}
    where = ("", "")
    addr = 0
    after_calls = False
    counts: dict[tuple[str, str], float] = defaultdict(float)
    seen: dict[tuple[str, str], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    with out.open() as text:
        for raw in text:
            line = raw.rstrip("\n")
            if not line:
                continue
            head = line[0]
            if head.isdigit() or head in "+-*" or line.startswith("0x"):
                fields = line.split()
                first = fields[0]
                if first[0] in "+-":
                    step = _number(first[1:])
                    addr += step if first[0] == "+" else -step
                elif first != "*":
                    addr = _number(first)
                # A call's line carries its callee's inclusive cost: only its address counts
                # (the call instruction's own cost is on a line of its own).
                if not after_calls and len(fields) > 2:
                    seen[where][addr] += int(fields[2])
                    counts[where] += int(fields[2])
                after_calls = False
                continue
            if line.startswith("calls="):
                after_calls = True
                continue
            named = _NAMED.match(line)
            if named:
                kind, key, name = named.groups()
                table = objects if kind in ("ob", "cob") else functions  # ob/cob share one
                if kind in ("ob", "cob", "fn", "cfn") and name is not None:
                    table[key] = name
                if kind == "ob":
                    where = (objects.get(key, key), "")
                elif kind == "fn":
                    where = (where[0], functions.get(key, key))
    return {w: (counts[w], seen[w]) for w in seen}


def on_the_path(seen: dict[int, int], n: int) -> set[int]:
    """The addresses run at least once every two requests (of `n`): the request's own path,
    not the timers and rare branches that also ran in the window."""
    return {a for a, runs in seen.items() if 2 * runs >= n}


def footprint(out: Path, n: int) -> list[Footprint]:
    """By group: instructions per request, distinct code lines and pages on the request's
    path."""
    instructions: dict[str, float] = defaultdict(float)
    addresses: dict[str, set[int]] = defaultdict(set)
    for (obj, _), (count, seen) in parse(out).items():
        group = group_of(obj)
        instructions[group] += count / n
        addresses[group] |= on_the_path(seen, n)
    rows = [
        Footprint(g, instructions[g], len({a // LINE for a in s}), len({a // PAGE for a in s}))
        for g, s in addresses.items()
    ]
    return sorted(rows, key=lambda r: -r.lines)


def by_function(out: Path, n: int, top: int) -> list[Footprint]:
    """The `top` functions by distinct code lines run (`group` is `function (layer)`)."""
    rows = []
    for (obj, fn), (count, seen) in parse(out).items():
        path = on_the_path(seen, n)
        name = f"{callprofile.function_name(fn)} ({group_of(obj).split(' (')[0]})"
        lines, pages = len({a // LINE for a in path}), len({a // PAGE for a in path})
        rows.append(Footprint(name, count / n, lines, pages))
    return sorted(rows, key=lambda r: -r.lines)[:top]


def render(rows: list[Footprint], label: str, n: int) -> list[str]:
    total = Footprint(
        "**per request**",
        sum(r.instructions for r in rows),
        sum(r.lines for r in rows),
        sum(r.pages for r in rows),
    )
    lines = [
        f"code footprint of a proxied request ({label}, callgrind, n={n}):",
        "",
        "| code in | instructions per request | distinct 64-byte code lines | KiB | 4 KiB pages |",
        "|---|--:|--:|--:|--:|",
    ]
    for r in [*rows, total]:
        kib = r.lines * LINE / 1024
        lines.append(
            f"| {r.group} | {r.instructions:,.0f} | {r.lines:,} | {kib:,.1f} | {r.pages:,} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--src", help="a source tree (default: this checkout's src/)")
    parser.add_argument("--floor", choices=("relay", "httptools"), help="a floor proxy instead")
    parser.add_argument("--inbound", action="store_true", help="the callee's sidecar")
    parser.add_argument("-n", type=int, default=1000, help="requests counted")
    parser.add_argument("--top", type=int, default=25, help="functions listed by code lines")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("bench footprint: valgrind is not installed (apt-get install valgrind)")
        return 1
    workdir = Path(tempfile.mkdtemp(prefix="ccb-footprint-"))
    try:
        tree = args.src or str(callprofile.HERE / "src")
        callprofile.profile(
            tree, args.n, workdir, args.floor or "", args.inbound, valgrind=("--dump-instr=yes",)
        )
        rows = footprint(workdir / "callgrind.out", args.n)
        functions = by_function(workdir / "callgrind.out", args.n, args.top)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    label = f"floor proxy {args.floor}" if args.floor else tree
    print("\n".join(render(rows, label, args.n)))
    print("\n| function (layer) | instructions per request | distinct code lines | pages |")
    print("|---|--:|--:|--:|")
    for f in functions:
        print(f"| {f.group} | {f.instructions:,.0f} | {f.lines:,} | {f.pages:,} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
