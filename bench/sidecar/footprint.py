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

With `--cold`, it counts what one request touches from cold caches instead, code and data:
callgrind's cache simulator with caches so large that nothing is evicted, turned on for a
window of a single request, counts each 64-byte line of code and of data (objects, type
objects, module globals, the stack) the first time it is touched. That is what the request
must fetch again when it arrives after the caches went cold (at 1000 rps, every request). A
periodic task may run in a window: the quietest of `--windows` windows counts.
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

from bench.sidecar import callprofile, instructions

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


def _named(
    line: str, objects: dict[str, str], functions: dict[str, str], where: tuple[str, str]
) -> tuple[str, str]:
    """Follow a name line (`ob=(1) /lib/x.so`, `fn=(3)`: a name is given once, then its id;
    `ob` and `cob` share one table, `fn` and `cfn` another): the (object, function) the next
    cost lines belong to. Any other line leaves it as it was."""
    named = _NAMED.match(line)
    if not named:
        return where
    kind, key, name = named.groups()
    table = objects if kind in ("ob", "cob") else functions
    if kind in ("ob", "cob", "fn", "cfn") and name is not None:
        table[key] = name
    if kind == "ob":
        return (objects.get(key, key), "")
    if kind == "fn":
        return (where[0], functions.get(key, key))
    return where


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
            where = _named(line, objects, functions, where)
    return {w: (counts[w], seen[w]) for w in seen}


# Caches so large that nothing is evicted: every miss is a line's first touch in the window.
COLD_CACHES = (
    "--cache-sim=yes",
    "--I1=1048576,16,64",
    "--D1=1048576,16,64",
    "--LL=67108864,16,64",
)


@dataclass(frozen=True)
class Touched:
    """Lines a request touches from cold caches: instructions, code lines, data lines."""

    group: str
    instructions: int
    code_lines: int
    data_lines: int


def own_events(out: Path) -> dict[tuple[str, str], dict[str, int]]:
    """Every event's own cost by (object, function), from a callgrind output file of any
    positions (named in its header); a call's line, its callee's inclusive cost, left out."""
    objects: dict[str, str] = {}
    functions: dict[str, str] = {}
    events: list[str] = []
    skip = 1  # position fields before the events
    where = ("", "")
    after_calls = False
    costs: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    with out.open() as text:
        for raw in text:
            line = raw.rstrip("\n")
            if not line:
                continue
            head = line[0]
            if head.isdigit() or head in "+-*":
                if after_calls:
                    after_calls = False
                    continue
                own = costs[where]
                for name, value in zip(events, line.split()[skip:], strict=False):
                    own[name] += int(value)
                continue
            if line.startswith("calls="):
                after_calls = True
            elif line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("positions:"):
                skip = len(line.split()) - 1
            else:
                where = _named(line, objects, functions, where)
    return {w: dict(c) for w, c in costs.items()}


def _touched(group: str, events: dict[str, int]) -> Touched:
    data = events.get("D1mr", 0) + events.get("D1mw", 0)
    return Touched(group, events.get("Ir", 0), events.get("I1mr", 0), data)


def first_touches(
    costs: dict[tuple[str, str], dict[str, int]], top: int
) -> tuple[list[Touched], list[Touched]]:
    """By layer, then the `top` functions: lines touched first in a cold-cache window."""
    layers: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    functions = []
    for (obj, fn), events in costs.items():
        group = group_of(obj)
        for name, value in events.items():
            layers[group][name] += value
        label = f"{callprofile.function_name(fn)} ({group.split(' (')[0]})"
        functions.append(_touched(label, events))
    rows = sorted((_touched(g, e) for g, e in layers.items()), key=lambda r: -r.code_lines)
    functions.sort(key=lambda r: -(r.code_lines + r.data_lines))
    return rows, functions[:top]


def quietest(
    windows: list[dict[tuple[str, str], dict[str, int]]],
) -> dict[tuple[str, str], dict[str, int]]:
    """The window with the fewest instructions: the one no periodic task ran in."""
    return min(windows, key=lambda w: sum(e.get("Ir", 0) for e in w.values()))


def render_cold(rows: list[Touched], label: str) -> list[str]:
    total = Touched(
        "**one request**",
        sum(r.instructions for r in rows),
        sum(r.code_lines for r in rows),
        sum(r.data_lines for r in rows),
    )
    lines = [
        f"lines one proxied request touches from cold caches ({label}, callgrind's cache"
        " simulator, the quietest window of one request):",
        "",
        "| code in | instructions | code lines | data lines | KiB in all |",
        "|---|--:|--:|--:|--:|",
    ]
    for r in [*rows, total]:
        kib = (r.code_lines + r.data_lines) * LINE / 1024
        lines.append(
            f"| {r.group} | {r.instructions:,} | {r.code_lines:,} | {r.data_lines:,} | {kib:,.1f} |"
        )
    return lines


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
    parser.add_argument(
        "--no-cascade", action="store_true", help="the outbound sidecar with the cascade disabled"
    )
    parser.add_argument(
        "--cold", action="store_true", help="code and data lines one request touches from cold"
    )
    parser.add_argument(
        "--windows", type=int, default=5, help="--cold: windows, the quietest counts"
    )
    parser.add_argument("-n", type=int, default=1000, help="requests counted")
    parser.add_argument("--top", type=int, default=25, help="functions listed by code lines")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("bench footprint: valgrind is not installed (apt-get install valgrind)")
        return 1
    tree = args.src or str(callprofile.HERE / "src")
    label = f"floor proxy {args.floor}" if args.floor else tree
    if args.no_cascade and not args.floor:
        label += " (cascade disabled)"
    if args.cold:
        return _cold(args, tree, label)
    workdir = Path(tempfile.mkdtemp(prefix="ccb-footprint-"))
    try:
        callprofile.profile(
            tree,
            args.n,
            workdir,
            args.floor or "",
            args.inbound,
            valgrind=("--dump-instr=yes",),
            cascade=not args.no_cascade,
        )
        rows = footprint(workdir / "callgrind.out", args.n)
        functions = by_function(workdir / "callgrind.out", args.n, args.top)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("\n".join(render(rows, label, args.n)))
    print("\n| function (layer) | instructions per request | distinct code lines | pages |")
    print("|---|--:|--:|--:|")
    for f in functions:
        print(f"| {f.group} | {f.instructions:,.0f} | {f.lines:,} | {f.pages:,} |")
    return 0


def _cold(args: argparse.Namespace, tree: str, label: str) -> int:
    windows = []
    for _ in range(args.windows):
        workdir = Path(tempfile.mkdtemp(prefix="ccb-footprint-"))
        # The warm-up's connection carries the window's request: no connection set-up in it.
        drive = instructions.KeptConnection()
        try:
            callprofile.profile(
                tree,
                1,
                workdir,
                args.floor or "",
                args.inbound,
                valgrind=COLD_CACHES,
                cascade=not args.no_cascade,
                drive=drive,
            )
            windows.append(own_events(workdir / "callgrind.out"))
        finally:
            drive.close()
            shutil.rmtree(workdir, ignore_errors=True)
    rows, functions = first_touches(quietest(windows), args.top)
    print("\n".join(render_cold(rows, label)))
    print("\n| function (layer) | instructions | code lines | data lines |")
    print("|---|--:|--:|--:|")
    for f in functions:
        print(f"| {f.group} | {f.instructions:,} | {f.code_lines:,} | {f.data_lines:,} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
