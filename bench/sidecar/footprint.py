"""Code footprint per request: how much distinct machine code a proxied request runs.

    .venv/bin/python -m bench.sidecar.footprint --src TREE [--floor httptools] [-n 1000]

At a fixed 1000 rps every request meets caches gone cold while the process slept, so what a
request costs depends on how much code and data it touches as much as on its instructions.
This runs the same callgrind window as `bench.sidecar.callprofile` (N requests on one
keep-alive connection, warm-up left out) with `--dump-instr=yes` and counts, by the object the
code lives in, the distinct 64-byte lines and 4 KiB pages of code executed in the window. Every
request takes the same path, so that is one request's code footprint (what L1i, L2 and the
iTLB must hold, or fetch again after a sleep). Instructions are per request.
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


def parse(out: Path) -> dict[str, tuple[float, set[int]]]:
    """Instructions and executed code addresses by object, from a callgrind output file
    written with `--dump-instr=yes` (positions `instr line`; names and addresses compressed)."""
    names: dict[str, str] = {}
    obj = ""
    addr = 0
    after_calls = False
    counts: dict[str, float] = defaultdict(float)
    seen: dict[str, set[int]] = defaultdict(set)
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
                seen[obj].add(addr)
                if not after_calls and len(fields) > 2:  # a call's line carries its callee's cost
                    counts[obj] += int(fields[2])
                after_calls = False
                continue
            if line.startswith("calls="):
                after_calls = True
                continue
            named = _NAMED.match(line)
            if named and named.group(1) in ("ob", "cob"):  # one table of names for both
                key, name = named.group(2), named.group(3)
                if name is not None:
                    names[key] = name
                if named.group(1) == "ob":
                    obj = names.get(key, key)
            elif line.startswith("ob="):
                obj = line[3:]
    return {o: (counts[o], seen[o]) for o in seen}


def footprint(out: Path, n: int) -> list[Footprint]:
    """By group: instructions per request, distinct code lines and pages run in the window."""
    instructions: dict[str, float] = defaultdict(float)
    addresses: dict[str, set[int]] = defaultdict(set)
    for obj, (count, seen) in parse(out).items():
        group = group_of(obj)
        instructions[group] += count / n
        addresses[group] |= seen
    rows = [
        Footprint(g, instructions[g], len({a // LINE for a in s}), len({a // PAGE for a in s}))
        for g, s in addresses.items()
    ]
    return sorted(rows, key=lambda r: -r.lines)


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
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    label = f"floor proxy {args.floor}" if args.floor else tree
    print("\n".join(render(rows, label, args.n)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
