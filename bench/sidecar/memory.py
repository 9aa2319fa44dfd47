"""Memory of sidecars without a gRPC listener, after some traffic: RSS, peak RSS, PSS, USS.

    .venv/bin/python -m bench.sidecar.memory            # 3 sidecars of each shape, 5 s of wrk
    .venv/bin/python -m bench.sidecar.memory --src /tmp/main/src --label main   # compare

Starts nginx as the upstream, then `replicas` outbound-only sidecars (`ccb sidecar`, the
app -> upstream shape) and as many inbound-only ones (the upstream's own sidecar, forwarding to
nginx), drives each with wrk (16 connections) and reads /proc. Several replicas of one shape
share their library pages, so PSS is what one more sidecar costs a node; USS (private pages)
is the floor of that.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench.sidecar` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.sidecar import procs
from bench.sidecar.procs import Proc
from bench.sidecar.wrk import run_wrk


def _smaps(proc: Proc) -> dict[str, float]:
    """Pss and Private_* of /proc/PID/smaps_rollup, in MiB."""
    out: dict[str, float] = {}
    rollup = Path(f"/proc/{proc.process.pid}/smaps_rollup").read_text()
    for line in rollup.splitlines():
        key, _, rest = line.partition(":")
        if key in ("Pss", "Private_Clean", "Private_Dirty") and rest.split():
            out[key] = int(rest.split()[0]) / 1024
    return out


def _outbound_sidecar(workdir: Path, upstream_url: str, name: str) -> Proc:
    config: dict[str, object] = {
        "service": "checkout",
        "listen": {
            "outbound": f"127.0.0.1:{procs.free_port()}",
            "inbound": None,
            "grpc": None,
            "admin": f"127.0.0.1:{procs.free_port()}",
        },
        "upstreams": {"payment": {"url": upstream_url}},
        "log_level": "warning",
    }
    return procs.start_sidecar(workdir, name, config, "/payment/")


Row = tuple[str, int, float, float, float, float]  # name, requests, RSS, peak, PSS, USS


def measure(replicas: int, seconds: float, src: str | None) -> list[Row]:
    """Start the sidecars (from `src` when given: PYTHONPATH), load each, read /proc."""
    started: list[Proc] = []
    saved = os.environ.get("PYTHONPATH")
    if src is not None:
        os.environ["PYTHONPATH"] = src  # the sidecars (and what they exec) import that tree
    with tempfile.TemporaryDirectory(prefix="ccb-memory-") as tmp:
        workdir = Path(tmp)
        try:
            upstream = procs.start_upstream(workdir)
            started.append(upstream)
            url = f"http://127.0.0.1:{upstream.port}"
            sidecars: list[tuple[Proc, str]] = []
            for i in range(replicas):
                out = _outbound_sidecar(workdir, url, f"outbound-{i}")
                started.append(out)
                sidecars.append((out, "/payment/"))
            for i in range(replicas):
                server = procs.start_server_sidecar(workdir, upstream.port)
                server.name = f"inbound-{i}"
                started.append(server)
                sidecars.append((server, "/"))
            requests = {}
            for proc, path in sidecars:
                result = run_wrk(f"http://127.0.0.1:{proc.port}{path}", 16, seconds, workdir)
                requests[proc.name] = result.requests
            # Read once every sidecar has served: PSS splits the pages they share.
            rows: list[Row] = []
            for proc, _ in sidecars:
                smaps = _smaps(proc)
                private = smaps["Private_Clean"] + smaps["Private_Dirty"]
                rss, peak = proc.rss_mb(), proc.peak_rss_mb()
                rows.append((proc.name, requests[proc.name], rss, peak, smaps["Pss"], private))
        finally:
            for proc in reversed(started):
                proc.stop()
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved
    return rows


def _table(rows: list[Row], label: str) -> list[str]:
    lines = [f"| sidecar ({label}) | requests | RSS MiB | peak RSS MiB | PSS MiB | USS MiB |"]
    lines.append("|---|--:|--:|--:|--:|--:|")
    for name, requests, rss, peak, pss, uss in rows:
        lines.append(f"| {name} | {requests:,} | {rss:.1f} | {peak:.1f} | {pss:.1f} | {uss:.1f} |")
    means = [sum(float(row[i]) for row in rows) / len(rows) for i in (2, 3, 4, 5)]
    lines.append("| **mean** | | " + " | ".join(f"**{m:.1f}**" for m in means) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Measure this checkout (and `--src OTHER/src` first, when given); print the tables."""
    parser = argparse.ArgumentParser(prog="python -m bench.sidecar.memory")
    parser.add_argument("--seconds", type=float, default=5.0, help="wrk seconds per sidecar")
    parser.add_argument("--replicas", type=int, default=3, help="sidecars of each shape")
    parser.add_argument("--src", help="another tree's src/ to measure first (e.g. main's)")
    parser.add_argument("--label", default="other", help="that tree's name in the table")
    args = parser.parse_args(argv)
    runs = [(args.label, args.src)] if args.src else []
    runs.append(("this checkout", None))
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(
        f"sidecars without a gRPC listener, {args.replicas} of each shape, "
        f"after {args.seconds:g} s of wrk -c 16 each ({when})"
    )
    for label, src in runs:
        print()
        print("\n".join(_table(measure(args.replicas, args.seconds, src), label)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
