"""The opt-in compiled build (mypyc) against the interpreted sidecar, per request.

    .venv/bin/python -m bench.sidecar.mypyc_trial                # build, count instructions
    .venv/bin/python -m bench.sidecar.mypyc_trial --wrk 5        # and CPU per request under wrk
    .venv/bin/python -m bench.sidecar.mypyc_trial --keep DIR     # keep the compiled tree in DIR

The wheel is built the way users build it (HATCH_BUILD_HOOK_ENABLE_MYPYC=1, the modules named
in pyproject.toml's mypyc hook), from a copy of this checkout, and unpacked into DIR/src (the
.so next to each .py, which Python imports first). The instructions bench then serves from
this checkout and from DIR/src in one run. Nothing compiled is written into the checkout. To
run the tests on the compiled build, use scripts/test-compiled.

First run, as a trial (2026-11-30, c96e6a6, n=2000): 151,687 instructions per request
interpreted, 91,941 with 32 modules compiled. Shipped opt-in since: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench.sidecar` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.sidecar import instructions, procs, wrk

HERE = Path(__file__).resolve().parents[2]


def compiled_modules() -> list[str]:
    """The source files the mypyc hook compiles (pyproject.toml is the one list)."""
    config = tomllib.loads((HERE / "pyproject.toml").read_text())
    hook = config["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"]["mypyc"]
    return [str(pattern).lstrip("/") for pattern in hook["include"]]


def copy_project(project: Path) -> Path:
    """What a wheel is built from, copied from this checkout (the hook compiles in place)."""
    project.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", "README.md", "hatch_build.py"):
        shutil.copy2(HERE / name, project / name)
    shutil.copytree(
        HERE / "src", project / "src", ignore=shutil.ignore_patterns("__pycache__", "*.so")
    )
    return project


def unpack(wheel: Path, tree: Path) -> Path:
    """Unpack a compiled wheel into `tree` (.so beside .py); stop if a module lacks its .so."""
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tree)
    sources = [tree / m.removeprefix("src/") for m in compiled_modules()]
    missing = [str(p) for p in sources if not list(p.parent.glob(f"{p.stem}.*.so"))]
    if missing:
        raise RuntimeError(f"{wheel.name} lacks the compiled {missing}")
    return tree


def build(dest: Path, env: dict[str, str] | None = None) -> Path:
    """Build the compiled wheel from a copy of this checkout (with `env` added to the build's
    environment) and unpack it; its tree's path."""
    project = copy_project(dest / "project")
    started = time.monotonic()
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dest / "dist")]
    run_build([*pip, str(project)], {"HATCH_BUILD_HOOK_ENABLE_MYPYC": "1", **(env or {})})
    (wheel,) = (dest / "dist").glob("cascadebreaker-*.whl")
    tree = unpack(wheel, dest / "src")
    took = time.monotonic() - started
    print(f"built {wheel.name}: {len(compiled_modules())} modules in {took:.0f} s", flush=True)
    return tree


def run_build(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> None:
    """Run a build command with `env` added; its output's tail in the error when it fails."""
    done = subprocess.run(
        argv, cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"the compiled build failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )


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
