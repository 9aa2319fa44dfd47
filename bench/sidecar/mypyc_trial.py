"""The mypyc trial of issue 13: what compiling the sidecar's hot modules saves per request.

    .venv/bin/python -m bench.sidecar.mypyc_trial                # build, count instructions
    .venv/bin/python -m bench.sidecar.mypyc_trial --wrk 5        # and CPU per request under wrk
    .venv/bin/python -m bench.sidecar.mypyc_trial --keep DIR     # keep the compiled copy in DIR

A copy of this checkout's src/ has the modules below compiled in place by mypyc (the .so next
to each .py, which Python imports first). The instructions bench then serves from this checkout
and from the copy in one run. Nothing compiled is written into the checkout. To run the tests
on the copy: `PYTHONPATH=DIR/src CI=true .venv/bin/python -m pytest -q tests/sidecar`.

First run (2026-11-30, c96e6a6, n=2000): 151,687 instructions per request interpreted, 91,941
with the modules below compiled; tests/sidecar and tests/cascade pass on the compiled copy,
tests/core has 3 failures (wrong-typed settings raise TypeError at a compiled boundary, not the
ValueError naming the setting; an unpickled CircuitOpenError hits a frozen compiled dataclass).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench.sidecar` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.sidecar import instructions, procs, wrk

HERE = Path(__file__).resolve().parents[2]

# The request path: parsing, framing, the pipeline, pool, cascade hop, breaker machine.
COMPILED = [
    *(f"sidecar/http/{m}" for m in ("connection", "exchange", "framing", "limits", "reader")),
    "sidecar/http/wire",
    *(f"sidecar/proxy/{m}" for m in ("call", "hooks", "pipeline", "routes", "runtime", "stats")),
    *(f"sidecar/proxy/{m}" for m in ("exchange", "endpoint_breakers", "endpoint_hint")),
    # ProxyExchange's base: a compiled class over an interpreted one may not have __slots__.
    "sidecar/proxy/replies",
    *(f"sidecar/upstream/{m}" for m in ("pool", "connection", "client")),
    "sidecar/mesh/hook",
    "sidecar/mesh/hop_memo",
    *(f"cascade/{m}" for m in ("learning", "availability", "trace", "endpoints")),
    "permit",
    *(f"core/{m}" for m in ("classify", "config", "machine", "probes", "state", "windows")),
]
# Left interpreted: breaker (a compiled class takes no weak references, and every breaker is
# in a WeakSet), core/policies (mypyc rejects `reason = Reason.X` over the base's `reason: str`;
# with that annotated, its frozen slotted dataclasses fail at import: "attribute '__dict__' of
# 'type' objects is not writable"), sidecar/upstream/model (compiled, the exceptions' class
# attributes `kind` did not reach subclasses: AttributeError, and the client never answered).

# Edits the copy needs: a method alias in a class body becomes an (unset) attribute of a
# compiled class, so httptools found no on_message_complete and no request ever ended. The
# base class's on_message_complete calls _request_complete anyway.
PATCHES = [
    (
        "sidecar/http/connection",
        "    on_message_complete = _request_complete\n",
        "",
    ),
]


def build(dest: Path) -> Path:
    """Copy src/ into `dest` and compile COMPILED there in place; the copy's src/ path."""
    src = dest / "src"
    shutil.copytree(HERE / "src", src, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for module, old, new in PATCHES:
        path = src / f"cascadebreaker/{module}.py"
        text = path.read_text()
        if old not in text:
            raise RuntimeError(f"{module}: the code to patch is gone ({old.strip()!r})")
        path.write_text(text.replace(old, new))
    mypyc = Path(sys.executable).parent / "mypyc"
    files = [f"cascadebreaker/{m}.py" for m in COMPILED]
    started = time.monotonic()
    done = subprocess.run(
        [str(mypyc), *files], cwd=src, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"mypyc failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    print(f"compiled {len(files)} modules in {time.monotonic() - started:.0f} s", flush=True)
    return src


def under_wrk(
    tree: str, upstream: int, workdir: Path, label: str, seconds: int
) -> tuple[float, float]:
    """The sidecar's CPU µs per request and requests per second, wrk (16 connections) driving it."""
    port = procs.free_port()
    argv = instructions.sidecar_argv(workdir, tree, upstream, port, label)
    log = workdir / f"{label}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=workdir)
    proc = procs.Proc(label, process, port, log)
    try:
        procs.wait_http(port, "/payment/", process, label, log)
        before = proc.cpu_seconds()
        result = wrk.run_wrk(f"http://127.0.0.1:{port}/payment/", 16, seconds, workdir)
        if result.errors or result.status_errors or not result.requests:
            raise RuntimeError(f"{label}: wrk errors {result}")
        return (proc.cpu_seconds() - before) / result.requests * 1e6, result.rps
    finally:
        proc.stop()


def wall(trees: dict[str, str], seconds: int, rounds: int = 3) -> None:
    """Alternate the trees under wrk; print the median CPU µs per request of each."""
    workdir = Path(tempfile.mkdtemp(prefix="ccb-mypyc-wrk-"))
    upstream = procs.start_upstream(workdir)
    samples: dict[str, list[tuple[float, float]]] = {label: [] for label in trees}
    try:
        for turn in range(rounds):
            for label, tree in trees.items():
                samples[label].append(
                    under_wrk(tree, upstream.port, workdir, f"{label}{turn}", seconds)
                )
    finally:
        upstream.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nsidecar under wrk -c16 -d{seconds}, {rounds} rounds (medians; a shared machine):\n")
    print("| tree | CPU µs per request | requests/s | CPU µs, each round |")
    print("|---|--:|--:|---|")
    for label, values in samples.items():
        cpu = statistics.median(v[0] for v in values)
        rps = statistics.median(v[1] for v in values)
        runs = ", ".join(f"{v[0]:.1f}" for v in values)
        print(f"| {label} | {cpu:.1f} | {rps:,.0f} | {runs} |")


def main(argv: list[str] | None = None) -> int:
    """Build the compiled copy, then count both trees' instructions (and CPU under wrk)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--keep", type=Path, help="build into this (new) directory and keep it")
    parser.add_argument("-n", type=int, default=2000, help="requests for the instructions bench")
    parser.add_argument("--wrk", type=int, default=0, help="also wrk for this many seconds")
    args = parser.parse_args(argv)
    dest = args.keep or Path(tempfile.mkdtemp(prefix="ccb-mypyc-"))
    dest.mkdir(parents=True, exist_ok=True)
    try:
        tree = str(build(dest))
        code = instructions.main(
            ["--no-peers", "-n", str(args.n), "--src", tree, "--label", "mypyc"]
        )
        if args.wrk:
            wall({"interpreted": str(HERE / "src"), "mypyc": tree}, args.wrk)
        return code
    finally:
        if args.keep is None:
            shutil.rmtree(dest, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
