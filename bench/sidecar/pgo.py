"""The compiled build with profile-guided optimisation (PGO), against the plain compiled build.

    .venv/bin/python -m bench.sidecar.pgo [--keep DIR] [--rounds 7]

A gRPC `Call` inside grpc.aio, and a request at a fixed 1000 rps, run with cold caches: the
data plane's code is evicted between two requests (docs/benchmarks.md, "The compiled Call").
Laying its hot code out together is then worth more than fewer instructions. This builds the
same modules as the mypyc hook (pyproject.toml's list) twice in one fixed directory: first
instrumented (`-fprofile-generate`), then, after a training run, with the profile
(`-fprofile-use`: gcc puts the functions the training ran into `.text.hot`, the rest into
`.text.unlikely`, and arranges branches by what was taken).

Training: a caller's and a callee's sidecar of the instrumented tree in front of nginx,
20,000 proxied requests through both, 5,000 gRPC Calls through the caller's; the processes
stop cleanly (the counts are written at exit). Then the PGO tree and the plain compiled tree
are measured side by side, interleaved: gRPC `Call` p50 and CPU at 1 connection, the pair's
added p90 and CPU at 1000 rps, and wrk's 16 connections.

The wheel users build (`HATCH_BUILD_HOOK_ENABLE_MYPYC=1`) is not profile-guided: its build
directory is a fresh temporary one, and the profile is keyed by the object files' paths.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench.sidecar` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.sidecar import instructions, mypyc_trial, procs, wrk
from bench.sidecar.loadgen import grpc_calls, paced_http
from bench.sidecar.run import _on_loop

HERE = Path(__file__).resolve().parents[2]
_SETUP = """\
from setuptools import setup
from mypyc.build import mypycify

setup(name="ccb-pgo", package_dir={{"": "src"}}, ext_modules=mypycify({args!r}))
"""


def _compile(project: Path, cflags: str) -> None:
    for old in [*project.glob("src/**/*.so"), project / "build"]:
        if old.is_dir():
            shutil.rmtree(old)
        elif old.exists():
            old.unlink()
    mypyc_trial.run_build(
        [sys.executable, "setup.py", "build_ext", "--inplace"], {"CFLAGS": cflags}, project
    )


def train(tree: Path, workdir: Path) -> None:
    """The training run: proxied requests through a caller's and a callee's sidecar, gRPC
    Calls through the caller's; both stop cleanly."""
    upstream = procs.start_upstream(workdir)
    try:
        server = procs.start_server_sidecar(workdir, upstream.port, "train-server", tree)
        client = procs.start_client_sidecar(
            workdir, f"http://127.0.0.1:{server.port}", "train-client", tree
        )
        try:
            instructions._http_driver(instructions._REQUEST)(client.port, 20_000)
            instructions._drive_grpc(client.extra_ports["grpc"], 5_000)
        finally:
            client.stop()
            server.stop()
    finally:
        upstream.stop()


def build(dest: Path) -> Path:
    """Build the PGO tree in `dest` (a new directory): the modules compiled, .so beside .py."""
    project = dest / "project"
    shutil.copytree(
        HERE / "src", project / "src", ignore=shutil.ignore_patterns("__pycache__", "*.so")
    )
    modules = mypyc_trial.compiled_modules()
    (project / "setup.py").write_text(_SETUP.format(args=["--ignore-missing-imports", *modules]))
    profile = dest / "profile"
    tree = project / "src"
    _compile(project, f"-fprofile-generate -fprofile-update=atomic -fprofile-dir={profile}")
    train(tree, dest)
    if not list(profile.glob("*.gcda")):
        raise RuntimeError(f"the training run wrote no profile into {profile}")
    _compile(
        project,
        f"-fprofile-use -fprofile-dir={profile} -fprofile-partial-training -Wno-missing-profile",
    )
    missing = [m for m in modules if not list((project / m).parent.glob(f"{Path(m).stem}.*.so"))]
    if missing:
        raise RuntimeError(f"the PGO build lacks the compiled {missing}")
    return tree


def compare(trees: dict[str, Path], rounds: int) -> list[str]:
    """gRPC Call, the pair at 1000 rps and wrk at 16 connections, each tree, interleaved."""
    workdir = Path(tempfile.mkdtemp(prefix="ccb-pgo-compare-"))
    upstream = procs.start_upstream(workdir)
    started: list[procs.Proc] = []
    try:
        sides = {}
        for label, tree in trees.items():
            server = procs.start_server_sidecar(workdir, upstream.port, f"{label}-server", tree)
            client = procs.start_client_sidecar(
                workdir, f"http://127.0.0.1:{server.port}", f"{label}-client", tree
            )
            alone = procs.start_client_sidecar(
                workdir, f"http://127.0.0.1:{upstream.port}", f"{label}-alone", tree
            )
            started += [server, client, alone]
            sides[label] = (client, server, alone)
        rows: dict[str, dict[str, list[float]]] = {label: {} for label in trees}
        for _ in range(rounds):
            direct = _on_loop(paced_http("127.0.0.1", upstream.port, "/", 1000.0, 3.0))
            for label, (client, server, alone) in sides.items():
                row = rows[label]
                before = procs.CpuReading.of(alone.process.pid)
                call = _on_loop(
                    grpc_calls(f"127.0.0.1:{alone.extra_ports['grpc']}", "payment", 1, 3.0)
                )
                cpu = sum(procs.CpuReading.of(alone.process.pid).split(before))
                row.setdefault("gRPC Call p50 µs", []).append(call.percentile(50))
                row.setdefault("gRPC Call CPU µs", []).append(cpu / (call.rps * 3.5) * 1e6)
                readings = [procs.CpuReading.of(p.process.pid) for p in (client, server)]
                paced = _on_loop(paced_http("127.0.0.1", client.port, "/payment/", 1000.0, 3.0))
                cpu = sum(
                    sum(procs.CpuReading.of(p.process.pid).split(r))
                    for p, r in zip((client, server), readings, strict=True)
                )
                row.setdefault("pair added p90 µs", []).append(
                    paced.percentile(90) - direct.percentile(90)
                )
                row.setdefault("pair CPU µs per request", []).append(cpu / (paced.rps * 3.5) * 1e6)
                loaded = wrk.run_wrk(f"http://127.0.0.1:{alone.port}/payment/", 16, 3, workdir)
                row.setdefault("wrk 16 conns req/s", []).append(loaded.rps)
    finally:
        for proc in started:
            proc.stop()
        upstream.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return render(rows, rounds)


def render(rows: dict[str, dict[str, list[float]]], rounds: int) -> list[str]:
    """One row per tree: each measure's median over rounds."""
    measures = list(next(iter(rows.values())))
    lines = [
        f"medians of {rounds} interleaved rounds:",
        "",
        "| build | " + " | ".join(measures) + " |",
        "|---|" + "--:|" * len(measures),
    ]
    for label, row in rows.items():
        cells = [f"{statistics.median(row[m]):,.1f}" for m in measures]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Build the plain and the PGO compiled trees, then compare them."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--keep", type=Path, help="build into this (new) directory and keep it")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    dest = args.keep or Path(tempfile.mkdtemp(prefix="ccb-pgo-"))
    try:
        plain = mypyc_trial.build(dest / "plain")
        guided = build(dest / "pgo")
        print("\n".join(compare({"compiled": plain, "compiled, PGO": guided}, args.rounds)))
    finally:
        if args.keep is None:
            shutil.rmtree(dest, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
