"""Profile a sidecar under load with py-spy, and summarise where its CPU time goes.

py-spy spawns the sidecar (attaching to a running process needs ptrace rights a container may
not grant), records raw collapsed stacks until the sidecar exits, and the summary lists the
functions with the most samples at the top of the stack (self time) and the sidecar functions
with the most samples anywhere on it (inclusive time). Start-up (imports) is left out. py-spy
samples Python frames: time in a C call (a socket send inside `transport.write`) is charged to
the Python function that made it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.sidecar.procs import BenchSetupError, ccb_command, free_port, wait_http
from bench.sidecar.wrk import run_wrk


@dataclass
class Profile:
    """Top frames of one profiled run."""

    samples: int
    self_top: list[tuple[str, float]]  # (function, share of samples)
    inclusive_top: list[tuple[str, float]]


_ENTRY = ("(cascadebreaker/cli.py)", "(cascadebreaker/sidecar/command.py)")


def py_spy() -> str | None:
    """The py-spy executable next to this Python, or on PATH."""
    local = Path(sys.executable).with_name("py-spy")
    return str(local) if local.exists() else shutil.which("py-spy")


def summarise(raw: str, top: int = 10) -> Profile:
    """Self and inclusive sample shares from py-spy's raw collapsed-stack output."""
    self_counts: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit() or "importlib" in stack:
            continue  # start-up (imports) is not the cost of serving
        count = int(count_text)
        total += count
        frames = [f.split(" (", 1)[0] + _where(f) for f in stack.split(";")]
        self_counts[frames[-1]] += count
        for frame in set(frames):
            if "cascadebreaker/" in frame:
                inclusive[frame] += count
    share = (lambda n: n / total) if total else (lambda n: 0.0)
    # The entry point is on every stack: no information.
    busy = [(f, n) for f, n in inclusive.most_common() if not f.endswith(_ENTRY)]
    return Profile(
        total,
        [(f, share(n)) for f, n in self_counts.most_common(top)],
        [(f, share(n)) for f, n in busy[:top]],
    )


def _where(frame: str) -> str:
    """` (module/file.py)` without the line number, so one function is one row."""
    _, _, rest = frame.partition(" (")
    return f" ({rest.rsplit(':', 1)[0]})" if rest else ""


def profile_outbound(workdir: Path, upstream_port: int, seconds: float) -> Profile | None:
    """Run a client sidecar under py-spy while wrk drives 16 connections through it."""
    binary = py_spy()
    if binary is None:
        return None
    port = free_port()
    config = {
        "service": "checkout",
        "listen": {"outbound": f"127.0.0.1:{port}", "inbound": None, "grpc": None, "admin": None},
        "upstreams": {
            "payment": {"url": f"http://127.0.0.1:{upstream_port}", "max_idle_connections": 256}
        },
        "log_level": "warning",
    }
    path = workdir / "profiled.yaml"
    path.write_text(yaml.safe_dump(config))
    out = workdir / "profile.txt"
    log = workdir / "profiled.log"
    argv = [
        binary,
        "record",
        "--format",
        "raw",
        "-r",
        "250",
        "-o",
        str(out),
        "--",
        *ccb_command(),
        "sidecar",
        "--config",
        str(path),
    ]
    with log.open("wb") as sink:
        spy = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)
    try:
        # On failure the sidecar under py-spy is stopped below, then py-spy itself.
        wait_http(port, "/payment/", spy, "profiled sidecar", log, kill_on_failure=False)
        run_wrk(f"http://127.0.0.1:{port}/payment/", 16, seconds, workdir)
    except BenchSetupError:
        return None
    finally:
        _stop_child(spy)
    return summarise(out.read_text()) if out.exists() else None


def _stop_child(spy: subprocess.Popen[bytes]) -> None:
    """SIGTERM the sidecar under py-spy; py-spy writes its file once the child exits."""
    children = Path(f"/proc/{spy.pid}/task/{spy.pid}/children")
    try:
        pids = [int(p) for p in children.read_text().split()]
    except OSError:
        pids = []
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while spy.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if spy.poll() is None:
        spy.kill()
        spy.wait(timeout=5)
