"""Where one proxied request's instructions go, function by function, counted by callgrind.

    .venv/bin/python -m bench.sidecar.callprofile                 # this checkout, interpreted
    .venv/bin/python -m bench.sidecar.callprofile --compiled      # the mypyc build of it
    .venv/bin/python -m bench.sidecar.callprofile --src TREE      # a tree built before
                                      # (python -m bench.sidecar.mypyc_trial --keep DIR)
    .venv/bin/python -m bench.sidecar.callprofile --inbound       # the callee's sidecar
    .venv/bin/python -m bench.sidecar.callprofile --grpc          # per gRPC Call
    .venv/bin/python -m bench.sidecar.callprofile --grpc --floor relay   # grpc_floor.py's GET

The sidecar runs under `valgrind --tool=callgrind` with instrumentation off while it starts
and warms up; it is switched on (`callgrind_control -i on`) just before N requests are sent in
turn on one keep-alive connection, from a client outside valgrind, to an nginx upstream that is
not counted; it is switched off again before the sidecar is stopped. Every count is divided by
N: instructions per request, start-up and shutdown left out. With `--inbound` the profiled
sidecar is the callee's (its inbound listener in front of nginx), and the requests reach it
through a caller's sidecar of the same tree (outbound, not counted), carrying what a calling
sidecar adds (its hop token).

The first table splits each request's own code by where it lives: the compiled sidecar (mypyc),
the CPython runtime it calls into (allocation, dicts, calls; the interpreter for code left
interpreted), httptools' llhttp, uvloop's libuv, libc. Then the compiled functions
(`CPyDef_module___Class___method`, shown as `module.Class.method`) with their callees
(inclusive: they add up to more than the total), and the costliest functions by own code.
Read it with the total of `python -m bench.sidecar.instructions`, which counts the same
request by difference.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench.sidecar` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import yaml

from bench.sidecar import instructions, procs

HERE = Path(__file__).resolve().parents[2]
# `  1,234,567 (12.34%)  file:function [object]` in callgrind_annotate's listing.
_LINE = re.compile(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(?:\*\s+)?(.+?)\s*$")
_COMPILED = re.compile(r"CPyDef_(\w+)")
_OBJECT = re.compile(r"\[([^\]]*)\]\s*$")
_NOT_NAMES = ("PROGRAM TOTALS",)
# Own code by the object it lives in: what each layer of the stack costs a request.
GROUPS = (
    ("compiled sidecar code (mypyc)", ("__mypyc.", "/cascadebreaker/")),
    ("CPython runtime (objects, calls, the interpreter)", ("libpython",)),
    ("httptools / llhttp (parsing)", ("httptools",)),
    ("uvloop / libuv (event loop, sockets)", ("uvloop",)),
    ("libc (memory, system call wrappers)", ("libc.so",)),
    ("libcrypto (hop tokens' HMAC)", ("libcrypto",)),
)


@dataclass(frozen=True)
class Cost:
    """A function's instructions per request."""

    name: str
    inclusive: float
    own: float


def function_name(location: str) -> str:
    """A readable name for a callgrind_annotate location.

    `/tmp/x/build/__native_1.c:CPyDef_proxy___exchange___ProxyExchange___start [obj]` is
    `proxy.exchange.ProxyExchange.start` (mypyc's `___` joins the parts); anything else keeps
    its function and the file's base name (`ceval.c:_PyEval_EvalFrameDefault`)."""
    location = re.sub(r"\s*\[[^\]]*\]\s*$", "", location).strip()
    compiled = _COMPILED.search(location)
    if compiled:
        return ".".join(part for part in compiled.group(1).split("___") if part)
    path, _, function = location.rpartition(":")
    return f"{Path(path).name}:{function}" if path else location


def parse_groups(text: str) -> dict[str, float]:
    """Own instructions by GROUPS (the object file a line's code is in); the rest `other`.

    callgrind_annotate leaves the object off some lines (header code inlined into a function
    it listed before): those take the object seen with the same function, else the build
    path's."""
    listed: list[tuple[float, str, str]] = []  # (count, function, object or the location)
    objects: dict[str, str] = {}
    for line in text.splitlines():
        match = _LINE.match(line)
        if not match or match.group(2).startswith(_NOT_NAMES):
            continue
        obj = _OBJECT.search(line)
        where = re.sub(r"\s*\[[^\]]*\]\s*$", "", match.group(2))
        function = where.rpartition(":")[2]
        if obj:
            objects.setdefault(function, obj.group(1))
        listed.append(
            (float(match.group(1).replace(",", "")), function, obj.group(1) if obj else where)
        )
    groups: dict[str, float] = {}
    for count, function, known in listed:
        lives_in = objects.get(function, known)
        if "python-build" in lives_in or "/Python-3." in lives_in:
            lives_in = "libpython"
        label = next((g for g, marks in GROUPS if any(m in lives_in for m in marks)), "other")
        groups[label] = groups.get(label, 0.0) + count
    return groups


def parse_annotate(text: str, inclusive: bool) -> dict[str, float]:
    """Instructions by readable function name; the program total under `total`.

    One function can be listed under more than one file (its .c file, and header code inlined
    into it). Own counts are parts of it: added. Each inclusive listing holds the whole: the
    largest is kept."""
    costs: dict[str, float] = {}
    for line in text.splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        count = float(match.group(1).replace(",", ""))
        where = match.group(2)
        if where.startswith(_NOT_NAMES):
            costs["total"] = count
            continue
        name = function_name(where)
        known = costs.get(name, 0.0)
        costs[name] = max(known, count) if inclusive else known + count
    return costs


@dataclass(frozen=True)
class Profile:
    """Instructions per request: by function (inclusive, own), by layer, in all."""

    inclusive: dict[str, float]
    own: dict[str, float]
    groups: dict[str, float]
    total: float


def profile(
    tree: str,
    n: int,
    workdir: Path,
    floor: str = "",
    inbound: bool = False,
    grpc: bool = False,
    valgrind: tuple[str, ...] = (),
    cascade: bool = True,
    drive: instructions.Driver | None = None,
) -> Profile:
    """Profile the sidecar from `tree` (or the floor proxy `floor`) serving `n` requests; with
    `inbound`, the callee's sidecar, reached through a caller's sidecar; with `grpc`, `n` gRPC
    Calls to its gRPC listener (the floor: `grpc_floor.py` making the bare upstream GET);
    without `cascade`, the outbound sidecar with the cascade disabled; `drive` replaces the
    HTTP driver. The profile stays in `workdir`/callgrind.out."""
    upstream = procs.start_upstream(workdir)
    caller: subprocess.Popen[bytes] | None = None
    try:
        port = procs.free_port()
        if grpc and floor:
            argv = [*instructions.grpc_floor_argv(port), str(upstream.port)]
        elif grpc:
            argv = instructions.sidecar_argv(
                workdir, tree, upstream.port, port, "profiled", listener="grpc"
            )
        elif floor:
            argv = instructions.floor_argv(floor, upstream.port, port)
        elif inbound:
            argv = inbound_argv(workdir, tree, upstream.port, port)
        else:
            argv = instructions.sidecar_argv(
                workdir, tree, upstream.port, port, "profiled", cascade=cascade
            )
        out = workdir / "callgrind.out"
        process = subprocess.Popen(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={out}",
                # `ccb sidecar` validates, then execs the serving process (same pid, same
                # file: the serving process's profile is the one written last).
                "--trace-children=yes",
                f"--log-file={workdir / 'valgrind.log'}",
                *valgrind,  # more of callgrind's options (bench.sidecar.footprint's)
                *argv,
            ],
            env={**os.environ, "PYTHONHASHSEED": "0"},
            cwd=workdir,
        )
        if drive is None:
            drive = (
                instructions._drive_grpc
                if grpc
                else instructions._http_driver(instructions._REQUEST)
            )
        try:
            instructions._wait_ready(port, process, drive)
            if inbound:  # the requests go through a caller's sidecar, which is not counted
                front = procs.free_port()
                command = instructions.sidecar_argv(workdir, tree, port, front, "caller")
                caller = subprocess.Popen(command, cwd=workdir)
                port = front
                instructions._wait_ready(port, caller, drive)  # (not under valgrind)
            drive(port, 200)  # warm: connections open, caches filled
            subprocess.run(
                ["callgrind_control", "--instr=on", str(process.pid)],
                check=True,
                capture_output=True,
            )
            drive(port, n)
            subprocess.run(  # shutdown is not the request's: interpreter teardown is costly
                ["callgrind_control", "--instr=off", str(process.pid)],
                check=True,
                capture_output=True,
            )
        finally:
            if caller is not None:
                caller.terminate()
                caller.wait(timeout=60)
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=300)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    finally:
        upstream.stop()
    inclusive = parse_annotate(_annotate(out, inclusive=True), inclusive=True)
    own_text = _annotate(out, inclusive=False)
    own = parse_annotate(own_text, inclusive=False)
    groups = parse_groups(own_text)
    total = own.pop("total", 0.0)
    inclusive.pop("total", None)
    if total <= 0:
        raise RuntimeError(f"callgrind counted nothing: {(workdir / 'valgrind.log').read_text()}")
    return Profile(
        {k: v / n for k, v in inclusive.items()},
        {k: v / n for k, v in own.items()},
        {k: v / n for k, v in groups.items()},
        total / n,
    )


def inbound_argv(workdir: Path, tree: str, app: int, port: int) -> list[str]:
    """`ccb sidecar` from `tree` for the callee: its inbound listener on `port`, in front of
    the app on `app`."""
    config = {
        "service": "payment",
        "app": f"http://127.0.0.1:{app}",
        "listen": {"outbound": None, "inbound": f"127.0.0.1:{port}", "grpc": None, "admin": None},
        "log_level": "warning",
    }
    path = workdir / "callee.yaml"
    path.write_text(yaml.safe_dump(config))
    argv = instructions.sidecar_argv(workdir, tree, app, port, "callee-template")
    return [*argv[:-1], str(path)]  # the same command, the callee's config


def _annotate(out: Path, inclusive: bool) -> str:
    done = subprocess.run(
        [
            "callgrind_annotate",
            f"--inclusive={'yes' if inclusive else 'no'}",
            "--show=Ir",  # the one column read, also when the cache simulator added more
            "--threshold=100",
            "--auto=no",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def render(result: Profile, top: int) -> list[str]:
    """Markdown tables: own code by layer, then the top compiled functions and own costs."""
    total = result.total
    lines = [
        f"instructions per request: {total:,.0f}",
        "",
        "| own code in | instructions per request | share |",
        "|---|--:|--:|",
    ]
    for label, value in sorted(result.groups.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {label} | {value:,.0f} | {value / total:.0%} |")
    interpreted = result.inclusive.get("ceval.c:_PyEval_EvalFrameDefault", 0.0)
    lines += [
        "",
        f"Code left interpreted, with all it calls: {interpreted:,.0f} per request.",
        "",
        "| compiled function (inclusive) | instructions per request |",
        "|---|--:|",
    ]
    compiled = {k: v for k, v in result.inclusive.items() if "." in k and ":" not in k}
    for name, value in sorted(compiled.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"| {name} | {value:,.0f} |")
    lines += ["", "| function (own code only) | instructions per request |", "|---|--:|"]
    for name, value in sorted(result.own.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"| {name} | {value:,.0f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Profile one tree and print where its request's instructions go."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--src", help="a source tree (default: this checkout's src/)")
    parser.add_argument("--compiled", action="store_true", help="build the mypyc tree first")
    parser.add_argument(
        "--floor",
        choices=("relay", "httptools"),
        help="profile a floor proxy of bench/sidecar/floor_proxies.py instead",
    )
    parser.add_argument(
        "--inbound",
        action="store_true",
        help="profile the callee's sidecar (inbound), reached through a caller's sidecar",
    )
    parser.add_argument(
        "--grpc",
        action="store_true",
        help="profile gRPC Calls to the sidecar's gRPC listener (with --floor: grpc_floor.py's"
        " bare upstream GET)",
    )
    parser.add_argument(
        "--no-cascade", action="store_true", help="the outbound sidecar with the cascade disabled"
    )
    parser.add_argument("-n", type=int, default=2000, help="requests counted")
    parser.add_argument("--top", type=int, default=25, help="functions listed per table")
    args = parser.parse_args(argv)
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate"):
        if shutil.which(tool) is None:
            print(f"bench callprofile: {tool} is not installed (apt-get install valgrind)")
            return 1
    workdir = Path(tempfile.mkdtemp(prefix="ccb-callprofile-"))
    try:
        tree = args.src or str(HERE / "src")
        if args.compiled:
            from bench.sidecar import mypyc_trial

            tree = str(mypyc_trial.build(workdir / "build"))
        result = profile(
            tree,
            args.n,
            workdir,
            args.floor or "",
            args.inbound,
            args.grpc,
            cascade=not args.no_cascade,
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    label = f"floor proxy {args.floor}" if args.floor else tree
    if args.compiled and not args.floor:
        label = "the mypyc build of this checkout"
    if args.inbound and not args.floor:
        label += ", the callee's sidecar (inbound)"
    if args.grpc:
        label = "grpc.aio server + bare upstream GET" if args.floor else label + ", gRPC Call"
    print(f"\nwhere a proxied request's instructions go ({label}, callgrind, n={args.n}):\n")
    print("\n".join(render(result, args.top)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
