"""The compiled build with profile-guided optimisation (PGO): the wheel that ships, and its gain.

    .venv/bin/python -m bench.sidecar.pgo --wheel DIST           # build the PGO wheel into DIST
    .venv/bin/python -m bench.sidecar.pgo [--keep DIR] [--rounds 7]   # PGO against plain

A gRPC `Call` inside grpc.aio, and a request at a fixed 1000 rps, run with cold caches: the
data plane's code is evicted between two requests (docs/benchmarks.md, "The compiled Call").
Laying its hot code out together is then worth more than fewer instructions. The wheel is
built by the mypyc hook (`HATCH_BUILD_HOOK_ENABLE_MYPYC=1`, pyproject.toml's list) twice, in
one fixed build directory (`HATCH_MYPYC_BUILD_DIR`: gcc keys a profile by the object files'
paths): first instrumented (`-fprofile-generate`), then, after a training run, with the
profile (`-fprofile-use`: gcc puts the functions the training ran into `.text.hot`, the rest
into `.text.unlikely`, and arranges branches by what was taken; `-fprofile-partial-training`
keeps what the training never ran optimised as in the plain build).

Training: a caller's and a callee's sidecar of the instrumented wheel in front of nginx,
20,000 proxied requests through both, 5,000 gRPC Calls through the caller's; the processes
stop cleanly (the counts are written at exit). The comparison measures the PGO wheel and the
plain compiled wheel side by side, interleaved: gRPC `Call` p50 and CPU at 1 connection, the
pair's added p90 and CPU at 1000 rps, and wrk's 16 connections. `scripts/build-compiled`
runs `--wheel`; `scripts/test-compiled` tests the wheel it builds.
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
import zipfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench.sidecar` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.sidecar import instructions, mypyc_trial, procs, wrk
from bench.sidecar.loadgen import grpc_calls, paced_http
from bench.sidecar.run import _on_loop

HERE = Path(__file__).resolve().parents[2]
# Local calls (-fno-semantic-interposition, -Wl,-Bsymbolic-functions) come from the project's
# own build hook (hatch_build.py) in every mypyc build; the "hook alone" tree switches them off.
_NO_LOCAL_CALLS = {"CCB_BUILD_LOCAL_CALLS": "0"}
_GENERATE = "-fprofile-generate -fprofile-update=atomic -fprofile-dir={profile}"
_USE = "-fprofile-use -fprofile-dir={profile} -fprofile-partial-training -Wno-missing-profile"


def hook_wheel(project: Path, build_dir: Path, out: Path, cflags: str) -> Path:
    """The mypyc hook's wheel of `project` into `out`, compiled in `build_dir` (made afresh,
    at the same path each time) with `cflags` added to the user's (and, by hatch_build.py,
    the local-call flags)."""
    shutil.rmtree(build_dir, ignore_errors=True)
    build_dir.mkdir(parents=True)
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    pip += ["-w", str(out)]
    env = {
        "HATCH_BUILD_HOOK_ENABLE_MYPYC": "1",
        "HATCH_MYPYC_BUILD_DIR": str(build_dir),
        "CFLAGS": f"{os.environ.get('CFLAGS', '')} {cflags}".strip(),
    }
    mypyc_trial.run_build([*pip, str(project)], env)
    (wheel,) = out.glob("cascadebreaker-*.whl")
    return wheel


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


def build_wheel(dest: Path, out: Path) -> Path:
    """Build the PGO wheel into `out`; `dest` (a new directory) holds the build, the
    instrumented wheel and the profile."""
    started = time.monotonic()
    project = mypyc_trial.copy_project(dest / "project")
    build_dir, profile = dest / "build", dest / "profile"
    instrumented = hook_wheel(
        project, build_dir, dest / "instrumented", _GENERATE.format(profile=profile)
    )
    train(mypyc_trial.unpack(instrumented, dest / "instrumented-src"), dest)
    if not list(profile.rglob("*.gcda")):
        raise RuntimeError(f"the training run wrote no profile into {profile}")
    built = hook_wheel(project, build_dir, dest / "dist", _USE.format(profile=profile))
    hot = sum(hot_text_bytes(o) for o in build_dir.rglob("*.o"))
    if not hot:  # gcc found no profile it could use: a plain build, not the one promised
        raise RuntimeError(f"the profile in {profile} was not used (no .text.hot in the build)")
    instrumented_left = instrumented_modules(built)
    if instrumented_left:  # they would write counts under dest/ at every exit, wherever run
        raise RuntimeError(f"{built.name} ships instrumented code: {instrumented_left}")
    wheel = deliver(built, out)
    took = time.monotonic() - started
    print(f"built {wheel.name} (PGO) in {took:.0f} s", flush=True)
    return wheel


def deliver(built: Path, out: Path) -> Path:
    """Copy a built wheel into `out` (which may hold others: each build writes into its own)."""
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / built.name
    if wheel.resolve() != built.resolve():
        shutil.copy2(built, wheel)
    return wheel


def instrumented_modules(wheel: Path) -> list[str]:
    """The wheel's extension modules that carry gcc's profiling runtime (`__gcov_`)."""
    with zipfile.ZipFile(wheel) as archive:
        return [
            n for n in archive.namelist() if n.endswith(".so") and b"__gcov_" in archive.read(n)
        ]


def hot_text_bytes(obj: Path) -> int:
    """The size of an object file's `.text.hot` section: where gcc puts what a profile says
    is hot (0 when it has none)."""
    done = subprocess.run(["readelf", "-SW", str(obj)], capture_output=True, text=True, check=True)
    for line in done.stdout.splitlines():
        fields = line.replace("]", "] ").split()
        if ".text.hot" in fields:
            at = fields.index(".text.hot")
            return int(fields[at + 4], 16)  # name, type, address, offset, size
    return 0


def build(dest: Path) -> Path:
    """Build the PGO wheel in `dest` (a new directory) and unpack it; its tree's path."""
    return mypyc_trial.unpack(build_wheel(dest, dest / "dist"), dest / "src")


def in_turn(labels: list[str], round_: int) -> list[str]:
    """The trees' order in round `round_`, rotated every round: no tree is always the one
    measured right after the direct run, or always last (a fixed order once made the same
    two trees differ by 0 % in one order and 7 % in the other on the pair's CPU)."""
    shift = round_ % len(labels)
    return labels[shift:] + labels[:shift]


def compare(trees: dict[str, Path], rounds: int) -> list[str]:
    """gRPC Call, the pair at 1000 rps and wrk at 16 connections, each tree, interleaved (the
    order rotated each round: `in_turn`)."""
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
        for round_ in range(rounds):
            direct = _on_loop(paced_http("127.0.0.1", upstream.port, "/", 1000.0, 3.0))
            for label in in_turn(list(sides), round_):
                client, server, alone = sides[label]
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
    parser.add_argument("--wheel", type=Path, help="only build the PGO wheel into this directory")
    parser.add_argument("--plain", action="store_true", help="with --wheel: no PGO, no training")
    args = parser.parse_args(argv)
    if args.wheel is not None:
        with tempfile.TemporaryDirectory(prefix="ccb-pgo-") as scratch:
            if args.plain:
                project = mypyc_trial.copy_project(Path(scratch) / "project")
                built = hook_wheel(project, Path(scratch) / "build", Path(scratch) / "dist", "")
                print(f"built {deliver(built, args.wheel.resolve()).name} (plain)", flush=True)
            else:
                build_wheel(Path(scratch), args.wheel.resolve())
        return 0
    dest = args.keep or Path(tempfile.mkdtemp(prefix="ccb-pgo-"))
    try:
        trees = {"compiled (the hook alone)": mypyc_trial.build(dest / "hook", _NO_LOCAL_CALLS)}
        project = mypyc_trial.copy_project(dest / "plain" / "project")
        built = hook_wheel(project, dest / "plain" / "build", dest / "plain" / "dist", "")
        trees["compiled, local calls (--plain)"] = mypyc_trial.unpack(built, dest / "plain" / "src")
        trees["compiled, local calls, PGO (ships)"] = build(dest / "pgo")
        print("\n".join(compare(trees, args.rounds)))
    finally:
        if args.keep is None:
            shutil.rmtree(dest, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
