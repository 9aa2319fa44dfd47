"""Soak and chaos: mixed load through a chain of sidecars while the run breaks things around it.

    .venv/bin/python -m bench chaos                    # 10 minutes; writes docs/reliability.md
    .venv/bin/python -m bench chaos --minutes 30       # longer
    .venv/bin/python -m bench chaos --short            # 1 minute smoke (prints only)

The system (bench/chaos/topology.py): checkout's sidecar -> payment's sidecar -> payment app,
which calls ledger through its sidecar; breakers in Redis; the cascade over Redis pub/sub and
peer Watch streams. While a fixed rate of well-formed requests runs through it (load.py), the
run kills Redis and starts a fresh one, freezes Redis (SIGSTOP) and thaws it, kills ledger's
sidecar (SIGKILL) and starts it again; 2,000 slow clients and a fuzzing client (hostile.py) hit
the sidecars all along. Then it reports requests lost and wrong refusals on healthy paths (both
must be 0), RSS and file descriptors over time (flat), and log lines (0 tracebacks); exit 1
when any verdict fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.cascade.run import write_section
from bench.chaos.load import Load, Outcome
from bench.chaos.report import Event, Sample, judge, log_lines, memory, series
from bench.chaos.topology import HEADER_TIMEOUT, RECOVERY, ROOT, Topology, build
from cascadebreaker.testing import throwaway_redis

DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
HEADING = "## Chaos and soak"
GRACE = RECOVERY + 7.0  # after a peer is back: probe, close, propagate "available"
SAMPLE_EVERY = 5.0


def timeline(seconds: float) -> list[Event]:
    """What to break when: one compressed cycle in a short run, cycles of 150 s in a long one."""
    if seconds < 300:
        t = seconds
        return [
            Event(0.15 * t, "kill redis", max(0.1 * t, 3)),
            Event(0.35 * t, "freeze redis", max(0.1 * t, 3)),
            Event(0.6 * t, "kill peer", max(0.07 * t, 3)),
        ]
    events = []
    start = 30.0
    while start + 130 < seconds - 30:
        events += [
            Event(start, "kill redis", 20),
            Event(start + 50, "freeze redis", 20),
            Event(start + 100, "kill peer", 10),
        ]
        start += 150
    return events


async def _break(topology: Topology, event: Event, started: float) -> None:
    """Carry out one event at its time: break, wait, repair."""
    await asyncio.sleep(max(0.0, started + event.at - time.monotonic()))
    print(f"  {event.at:6.1f}s {event.what} for {event.seconds:g}s", flush=True)
    peer = topology.sidecars["ledger"]
    actions: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
        "kill redis": (topology.kill_redis, topology.restart_redis),
        "freeze redis": (topology.freeze_redis, topology.thaw_redis),
        "kill peer": (peer.kill, peer.restart),
    }
    breaks, repairs = actions[event.what]
    breaks()
    await asyncio.sleep(event.seconds)
    await asyncio.to_thread(repairs)


async def _sample(
    topology: Topology, started: float, into: list[Sample], stop: asyncio.Event
) -> None:
    while not stop.is_set():
        now = time.monotonic() - started
        for name, sidecar in topology.sidecars.items():
            pid = sidecar.pid
            if pid is not None:
                into.append(Sample(now, name, _rss_mb(pid), _fds(pid)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), SAMPLE_EVERY)


def _rss_mb(pid: int) -> float:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def _load_average() -> str:
    """The machine's 1-minute load average (other work on a shared machine shows here)."""
    with contextlib.suppress(OSError):
        return Path("/proc/loadavg").read_text().split()[0]
    return "?"


@dataclass
class Record:
    """Everything one run recorded."""

    seconds: float
    events: list[Event]
    outcomes: list[Outcome]
    shed: int
    samples: list[Sample]
    hostile: dict[str, Any]
    exit_codes: dict[str, int | None]
    logs: dict[str, dict[str, Any]]
    noise: str


async def chaos(args: argparse.Namespace, workdir: Path) -> Record:
    """Build, load, break, repair, stop; return everything recorded."""
    seconds = args.minutes * 60
    with throwaway_redis() as redis:
        topology = await asyncio.to_thread(build, workdir, redis)
        started = time.monotonic()
        load_before = _load_average()
        events = timeline(seconds)
        load = Load(topology.load_url, args.rate, started)
        samples: list[Sample] = []
        stop_sampling = asyncio.Event()
        hostile_out = workdir / "hostile.json"
        hostile = await asyncio.to_thread(_spawn_hostile, topology, args, seconds, hostile_out)
        try:
            load_task = asyncio.ensure_future(load.run())
            sampler = asyncio.ensure_future(_sample(topology, started, samples, stop_sampling))
            breaking: list[Awaitable[None]] = [_break(topology, e, started) for e in events]
            await asyncio.gather(*breaking)
            await asyncio.sleep(max(0.0, started + seconds - time.monotonic()))
            load.stop()
            await load_task
            await asyncio.to_thread(hostile.wait, 120)
            stop_sampling.set()
            await sampler
            duration = time.monotonic() - started
            noise = (
                f"load average {load_before} at the start, {_load_average()} at the end, "
                f"{os.cpu_count()} cores"
            )
        finally:
            if hostile.poll() is None:
                hostile.kill()
            codes = await asyncio.to_thread(topology.stop)
    hostile_counts = await asyncio.to_thread(_read_json, hostile_out)
    logs = await asyncio.to_thread(_all_logs, workdir)
    await asyncio.to_thread(_dump_outcomes, workdir / "outcomes.jsonl", load.outcomes)
    return Record(
        duration, events, load.outcomes, load.shed, samples, hostile_counts, codes, logs, noise
    )


def _spawn_hostile(
    topology: Topology, args: argparse.Namespace, seconds: float, out: Path
) -> subprocess.Popen[bytes]:
    """The slow and fuzzing clients, in their own process, for 90 % of the run."""
    argv = [sys.executable, "-m", "bench.chaos.hostile"]
    argv += [f"--target={port}:{prefix}" for port, prefix in topology.hostile_targets()]
    argv += [f"--slow={args.slow_clients}", f"--fuzz-rate={args.fuzz_rate}"]
    argv += [f"--seconds={seconds * 0.9}", f"--out={out}"]
    with (out.parent / "hostile.log").open("wb") as log:
        return subprocess.Popen(
            argv, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log, stderr=subprocess.STDOUT
        )


def _dump_outcomes(path: Path, outcomes: list[Outcome]) -> None:
    """Every request that was not answered as expected, one JSON line each (for a post-mortem)."""
    with path.open("w") as out:
        for o in outcomes:
            if not o.ok:
                out.write(json.dumps(asdict(o)) + "\n")


def _all_logs(workdir: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: log_lines(p) for p in sorted(workdir.glob("*.log"))}


def _read_json(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text())) if path.exists() else {}


def render(record: Record, args: argparse.Namespace) -> tuple[str, bool]:
    """The report as markdown, and whether every verdict holds."""
    seconds, events, samples = record.seconds, record.events, record.samples
    verdict = judge(record.outcomes, events, GRACE)
    mem = memory(samples, warmup=min(60.0, seconds * 0.1), end=seconds)
    logs, exit_codes, hostile = record.logs, record.exit_codes, record.hostile
    sidecar_logs = {k: v for k, v in logs.items() if k.endswith("-sidecar")}
    tracebacks = sum(int(v["tracebacks"]) for v in sidecar_logs.values())
    app_tracebacks = sum(int(v["tracebacks"]) for v in logs.values()) - tracebacks
    # A short run is mostly warm-up (2,000 slow connections being opened): memory is shown,
    # judged only in runs of 5 minutes or more.
    flat = seconds < 300 or all(m["flat"] for m in mem.values())
    healthy = verdict.requests - sum(verdict.excused.values())
    passed = (
        not verdict.lost
        and not verdict.wrong_refusals
        and tracebacks == 0
        and flat
        and all(code == 0 for code in exit_codes.values())
        and hostile.get("counts", {}).get("fuzz_hung", 0) == 0
        and record.shed == 0
    )
    lines = [
        f"{seconds / 60:.1f} minutes, {verdict.requests:,} well-formed requests at "
        f"{args.rate:g}/s ({', '.join(f'{k} {v:,}' for k, v in sorted(verdict.by_kind.items()))}), "
        f"{args.slow_clients:,} slow clients, a fuzzing client at {args.fuzz_rate:g}/s; "
        f"{_describe_events(events)}. Machine: {record.noise}.",
        "",
        "| verdict | figure |",
        "|---|---|",
        f"| requests lost (healthy paths, {healthy:,} requests) | **{len(verdict.lost)}** |",
        f"| wrong refusals (healthy paths) | **{len(verdict.wrong_refusals)}** |",
        f"| `chain` requests during a peer outage (+{GRACE:g} s) | "
        + ", ".join(f"{k} {v:,}" for k, v in sorted(verdict.excused.items()))
        + " |",
        f"| requests the load client could not send (its own limit) | {record.shed} |",
        f"| tracebacks in the sidecars' logs (the apps': {app_tracebacks}) | **{tracebacks}** |",
        "| ERROR / WARNING lines (sidecars) | "
        + ", ".join(
            f"{k.removesuffix('-sidecar')} {v['errors']} / {v['warnings']}"
            for k, v in sidecar_logs.items()
        )
        + " |",
        "| sidecar exit codes after SIGTERM | "
        + ", ".join(f"{k} {v}" for k, v in exit_codes.items())
        + " |",
        f"| fuzzing client | {_fuzz_summary(hostile)} |",
        f"| slow clients | {_slow_summary(hostile)} |",
        "",
        "| sidecar | RSS after warm-up | RSS at the end | peak | growth | fds start / end / peak |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, m in mem.items():
        growth = f"{m['growth_mb']:+.1f} MiB" + ("" if m["flat"] else " **not flat**")
        lines.append(
            f"| {name} | {m['rss_start_mb']:.1f} MiB | {m['rss_end_mb']:.1f} MiB | "
            f"{m['rss_peak_mb']:.1f} MiB | {growth} | "
            f"{m['fds_start']:.0f} / {m['fds_end']:.0f} / {m['fds_peak']:.0f} |"
        )
    step = 60.0 if seconds >= 300 else 10.0
    names = sorted(mem)
    lines += ["", "RSS MiB (fds) over time:", "", "| t | " + " | ".join(names) + " |"]
    lines.append("|---:|" + "---:|" * len(names))
    for t, row in series(samples, step):
        cells = [f"{row[n][0]:.1f} ({row[n][1]})" if n in row else "-" for n in names]
        lines.append(f"| {t:.0f} s | " + " | ".join(cells) + " |")
    problems = [o for o in (*verdict.lost, *verdict.wrong_refusals)][:10]
    if problems:
        lines += ["", "First problems:", ""]
        lines += [f"- {o.at:.1f}s {o.kind}: {o.status} {o.error}" for o in problems]
    top = [(name, msg, n) for name, v in logs.items() for msg, n in v["top_errors"]]
    if top:
        lines += ["", "Commonest ERROR lines:", ""]
        lines += [f"- {name}: {n} x `{msg}`" for name, msg, n in top[:8]]
    lines += ["", f"Verdict: {'PASS' if passed else 'FAIL'}."]
    return "\n".join(lines), passed


def _describe_events(events: list[Event]) -> str:
    kinds: dict[str, list[Event]] = {}
    for e in events:
        kinds.setdefault(e.what, []).append(e)
    return "; ".join(f"{what} {len(es)}x ({es[0].seconds:g} s each)" for what, es in kinds.items())


def _fuzz_summary(hostile: dict[str, dict[str, int]]) -> str:
    counts, statuses = hostile.get("counts", {}), hostile.get("statuses", {})
    answered = ", ".join(
        f"{k.split()[1]} {v:,}" for k, v in sorted(statuses.items()) if k.startswith("fuzz")
    )
    return (
        f"{counts.get('fuzz_sent', 0):,} mutated requests: {answered}; closed without an "
        f"answer {counts.get('fuzz_closed_silently', 0):,}, reset {counts.get('fuzz_reset', 0):,}, "
        f"hung {counts.get('fuzz_hung', 0)}"
    )


def _slow_summary(hostile: dict[str, dict[str, int]]) -> str:
    counts, statuses = hostile.get("counts", {}), hostile.get("statuses", {})
    opened = sum(v for k, v in counts.items() if k.startswith("slow_") and k.endswith("_opened"))
    cut = ", ".join(
        f"{k.split()[1]} {v:,}" for k, v in sorted(statuses.items()) if k.startswith("slow")
    )
    return (
        f"{opened:,} connections held (cut with {cut or 'nothing'}; "
        f"header/body timeout {HEADER_TIMEOUT:g} s)"
    )


def main(argv: list[str] | None = None) -> int:
    """Run once; exit 1 when a verdict fails."""
    parser = argparse.ArgumentParser(
        prog="python -m bench chaos", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--minutes", type=float, default=10.0, help="duration (default 10)")
    parser.add_argument("--short", action="store_true", help="1 minute smoke; prints only")
    parser.add_argument("--rate", type=float, default=100.0, help="well-formed requests a second")
    parser.add_argument("--slow-clients", type=int, default=2000)
    parser.add_argument("--fuzz-rate", type=float, default=20.0, help="mutated requests a second")
    parser.add_argument("--workdir", type=Path, help="logs and configs (default: a temp dir)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.short:
        args.minutes = min(args.minutes, 1.0)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="ccb-chaos-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"chaos: {args.minutes:g} min, work directory {workdir}", flush=True)
    record = asyncio.run(chaos(args, workdir))
    text, passed = render(record, args)
    print(text)
    if args.json:
        verdict = judge(record.outcomes, record.events, GRACE)
        args.json.write_text(
            json.dumps(
                {
                    "passed": passed,
                    "lost": len(verdict.lost),
                    "wrong_refusals": len(verdict.wrong_refusals),
                    "requests": verdict.requests,
                    "excused": dict(verdict.excused),
                    "exit_codes": record.exit_codes,
                    "tracebacks": {k: v["tracebacks"] for k, v in record.logs.items()},
                    "events": [e.what for e in record.events],
                    "fuzz_sent": record.hostile.get("counts", {}).get("fuzz_sent", 0),
                    "fuzz_hung": record.hostile.get("counts", {}).get("fuzz_hung", 0),
                    "shed": record.shed,
                }
            )
        )
    if not args.short and args.minutes >= 10:
        machine = f"Python {platform.python_version()}, {os.cpu_count()} cores"
        write_section(
            DOC,
            f"{HEADING}\n\nLatest run: `python -m bench chaos --minutes {args.minutes:g}` "
            f"({machine}, {time.strftime('%Y-%m-%d')}).\n\n{text}\n",
        )
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
