"""Profile a sidecar under load with py-spy, and summarise where its CPU time goes.

py-spy spawns the serving process itself (attaching to a running process needs ptrace rights a
container may not grant): `python -m cascadebreaker.sidecar.serve FD` with the config validated
here, as `ccb sidecar` hands it over. Not `ccb sidecar`: that validates, then execs the serving
process in the same PID, and py-spy keeps reading the interpreter it found before the exec (every
sample after it is an error; the profile held only the validation's start-up). It records raw
collapsed stacks until the sidecar exits; the summary lists the functions with the most samples
at the top of the stack (self time) and the sidecar functions with the most samples anywhere on
it (inclusive time). Only the serving process's stacks count, start-up (imports) left out. A
profile without a sample raises `ProfileError` naming the cause, never an empty table. py-spy
samples Python frames: time in a C call (a socket send inside `transport.write`) is charged to
the Python function that made it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.sidecar.procs import BenchSetupError, free_port, wait_http
from bench.sidecar.wrk import run_wrk


@dataclass
class Profile:
    """Top frames of one profiled run."""

    samples: int
    self_top: list[tuple[str, float]]  # (function, share of samples)
    inclusive_top: list[tuple[str, float]]


SERVE_MODULE = "cascadebreaker.sidecar.serve"
_SERVING = "(cascadebreaker/sidecar/serve.py:"  # on every stack of the serving process
_ENTRY = "(cascadebreaker/sidecar/serve.py)"  # so on every stack: no information
_PY_SPY_COUNTS = re.compile(r"Samples: \d+ Errors: \d+")


class ProfileError(RuntimeError):
    """The profile could not be recorded; the message names the cause."""


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
        if _SERVING not in stack:
            continue  # not the serving process (`ccb sidecar` validating, before its exec)
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


def from_py_spy(raw: str, log: str) -> Profile:
    """The summary of py-spy's raw output; `ProfileError` when it holds no sample of serving."""
    profile = summarise(raw)
    if profile.samples == 0:
        counts = _PY_SPY_COUNTS.findall(log)
        said = f"py-spy: {counts[-1]}" if counts else f"py-spy said: {log.strip()[-300:]!r}"
        raise ProfileError(f"py-spy recorded no sample of the serving sidecar ({said})")
    return profile


def serving_argv(config_fd: int, shown_path: Path) -> list[str]:
    """The serving process, as `ccb sidecar` execs it (`--config` only names the file in ps)."""
    return [sys.executable, "-m", SERVE_MODULE, str(config_fd), "--config", str(shown_path)]


def _validated(config: dict[str, object], workdir: Path) -> Path:
    """The config validated as `ccb sidecar` does, in the JSON form the serving process reads."""
    from cascadebreaker.sidecar.config import config_to_dict
    from cascadebreaker.sidecar.schema import parse_config

    path = workdir / "profiled.json"
    path.write_text(json.dumps(config_to_dict(parse_config(config))))
    return path


def profile_outbound(workdir: Path, upstream_port: int, seconds: float) -> Profile:
    """Run a client sidecar under py-spy while wrk drives 16 connections through it.

    Raises `ProfileError` naming the cause when there is no profile to show."""
    binary = py_spy()
    if binary is None:
        raise ProfileError(
            "py-spy is not installed (pip install py-spy, or the bench extra; --no-profile skips)"
        )
    port = free_port()
    config: dict[str, object] = {
        "service": "checkout",
        "listen": {"outbound": f"127.0.0.1:{port}", "inbound": None, "grpc": None, "admin": None},
        "upstreams": {
            "payment": {"url": f"http://127.0.0.1:{upstream_port}", "max_idle_connections": 256}
        },
        "log_level": "warning",
    }
    shown = workdir / "profiled.yaml"
    shown.write_text(yaml.safe_dump(config))
    out = workdir / "profile.txt"
    log = workdir / "profiled.log"
    with _validated(config, workdir).open("rb") as handed_over:
        fd = handed_over.fileno()
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
            *serving_argv(fd, shown),
        ]
        with log.open("wb") as sink:
            # py-spy passes the descriptor on to the process it spawns.
            spy = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, pass_fds=(fd,))
    try:
        # On failure the sidecar under py-spy is stopped below, then py-spy itself.
        wait_http(port, "/payment/", spy, "profiled sidecar", log, kill_on_failure=False)
        run_wrk(f"http://127.0.0.1:{port}/payment/", 16, seconds, workdir)
    except BenchSetupError as exc:
        raise ProfileError(f"the sidecar under py-spy did not serve: {exc}") from exc
    finally:
        _stop_child(spy)
    said = log.read_text(errors="replace")
    if not out.exists():
        raise ProfileError(f"py-spy wrote no profile (exit {spy.returncode}): {said[-300:]!r}")
    return from_py_spy(out.read_text(), said)


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
