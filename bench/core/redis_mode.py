"""Redis mode: per-call cost of a shared breaker, cascadebreaker's RedisStore against pybreaker's
CircuitRedisStorage, on a throwaway redis-server (loopback, free port) started for the run."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from bench.core.cases import OURS, Case, bare, version
from bench.core.timing import Timed, measure, prepare
from cascadebreaker.testing.ports import free_port

TARGET_RATIO = 20.0  # RedisStore must be at least this many times cheaper per call


@dataclass
class RedisRow:
    """One Redis-mode result (ns per call over the bare call), or why there is none."""

    library: str
    version: str
    form: str
    mode: str
    over_best: float | None = None
    over_median: float | None = None
    cheaper: float | None = None  # pybreaker's per-call cost / this row's
    note: str = ""


@contextmanager
def redis_server() -> Iterator[str]:
    """Start redis-server on a free loopback port; yield its URL; kill it afterwards."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server not found on PATH")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="ccb-bench-redis-") as workdir:
        args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "no", "--dir", workdir]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _wait_for_pong(port)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.kill()
            proc.wait(timeout=10)


def _wait_for_pong(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"redis-server did not answer on port {port}")


def _cases(url: str) -> tuple[list[Case], list[RedisRow], list[object]]:
    """Cases to time, rows for libraries that could not be built, and things to close."""
    cases: list[Case] = []
    missing: list[RedisRow] = []
    closers: list[object] = []
    try:
        from cascadebreaker import CircuitBreaker, RedisStore

        store = RedisStore.from_url(url, namespace="bench")
        closers.append(store)
        store.wait_ready()
        b = CircuitBreaker("bench", failure_threshold=5, recovery_timeout=30.0, store=store)
        env = {"b": b}
        note = "closed path: local view, outcomes reported in the background"
        cases.append(Case(OURS, "RedisStore b.call(fn)", "sync", "b.call(fn)", env, note))
        cases.append(
            Case(OURS, "RedisStore b.acall(afn)", "async", "await b.acall(afn)", env, note)
        )
    except Exception as exc:
        missing.append(RedisRow(OURS, version(OURS), "RedisStore", "sync", note=repr(exc)))
    try:
        import pybreaker
        import redis

        client = redis.Redis.from_url(url)
        closers.append(client)
        storage = pybreaker.CircuitRedisStorage(pybreaker.STATE_CLOSED, client, namespace="bench")
        pb = pybreaker.CircuitBreaker(fail_max=5, reset_timeout=30, state_storage=storage)
        note = "state read and written in Redis on every call"
        cases.append(
            Case(
                "pybreaker",
                "CircuitRedisStorage pb.call(fn)",
                "sync",
                "pb.call(fn)",
                {"pb": pb},
                note,
            )
        )
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}"
        missing.append(RedisRow("pybreaker", version("pybreaker"), "-", "sync", note=reason))
    return cases, missing, closers


def run_redis_mode(repeats: int, round_ms: float) -> list[RedisRow]:
    """Time the Redis-mode cases; rows sorted sync first, cheapest first."""
    with redis_server() as url:
        cases, rows, closers = _cases(url)
        try:
            timed, failed = prepare([c for c in bare() if isinstance(c, Case)] + cases)
            measure(timed, repeats, round_ms, min_iterations=200)
        finally:
            for thing in closers:
                thing.close()  # type: ignore[attr-defined]
    base = {t.case.mode: t for t in timed if t.case.library == "bare call"}
    results: list[Timed] = [t for t in timed if t.case.library != "bare call"]
    for t in results:
        b = base[t.case.mode]
        rows.append(
            RedisRow(
                t.case.library,
                version(t.case.library),
                t.case.form,
                t.case.mode,
                t.best - b.best,
                t.median - b.median,
                note=t.case.note,
            )
        )
    for case, reason in failed:
        rows.append(
            RedisRow(case.library, version(case.library), case.form, case.mode, note=reason)
        )
    reference = next((r.over_best for r in rows if r.library == "pybreaker" and r.over_best), None)
    for r in rows:
        if reference and r.over_best:
            r.cheaper = reference / max(r.over_best, 1.0)
    rows.sort(key=lambda r: (r.mode != "sync", r.over_best is None, r.over_best or 0.0))
    return rows


def redis_verdicts(rows: list[RedisRow]) -> list[str]:
    """Whether each RedisStore form is at least TARGET_RATIO times cheaper than pybreaker's."""
    lines = []
    for r in rows:
        if r.library != OURS or r.over_best is None:
            continue
        if r.cheaper is None:
            lines.append(f"{r.mode} `{r.form}`: {r.over_best:,.0f} ns (no pybreaker reference)")
            continue
        met = "met" if r.cheaper >= TARGET_RATIO else "MISSED"
        lines.append(
            f"{r.mode} `{r.form}`: {r.over_best:,.0f} ns, {r.cheaper:,.0f}x cheaper than "
            f"pybreaker's Redis storage: {met} (target ≥ {TARGET_RATIO:.0f}x)"
        )
    return lines
