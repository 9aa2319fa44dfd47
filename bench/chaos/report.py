"""The chaos run's verdicts, from what was recorded (pure: unit-tested in tests/fuzz).

- **lost**: a well-formed request to a healthy path that did not get its expected answer
  (an error status, no response, a wrong body), refusals aside;
- **wrong refusal**: a sidecar refused (503 with retry-after / ccb-cause) a request to a
  healthy path;
- a path is healthy unless the run had made it unhealthy: `chain` requests from one client
  timeout before a peer was killed until `grace` seconds after it was back are excused (they
  may fail or be refused early: that is the cascade at work) and counted apart;
- **memory**: RSS per sidecar, the median of the samples after warm-up against the median of
  the last stretch; flat when it grew by less than 10 MiB or 10 %;
- **log lines**: tracebacks (must be 0), ERROR and WARNING lines per process log.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.chaos.load import CLIENT_TIMEOUT, Outcome

FLAT_MB = 10.0
FLAT_SHARE = 0.10


@dataclass(frozen=True, slots=True)
class Event:
    """Something the run did to the system, from `at` for `seconds` (s since the start)."""

    at: float
    what: str
    seconds: float


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading of one process."""

    at: float
    process: str
    rss_mb: float
    fds: int


@dataclass
class Verdict:
    """The run's figures."""

    requests: int = 0
    ok: int = 0
    lost: list[Outcome] = field(default_factory=list)
    wrong_refusals: list[Outcome] = field(default_factory=list)
    excused: Counter[str] = field(default_factory=Counter)
    by_kind: Counter[str] = field(default_factory=Counter)


def excused_windows(events: Iterable[Event], grace: float) -> list[tuple[float, float]]:
    """When `chain` requests may fail: around each peer outage."""
    return [
        (e.at - CLIENT_TIMEOUT, e.at + e.seconds + grace) for e in events if e.what == "kill peer"
    ]


def judge(outcomes: Sequence[Outcome], events: Sequence[Event], grace: float) -> Verdict:
    """Sort every outcome into ok, lost, wrong refusal or excused."""
    windows = excused_windows(events, grace)
    verdict = Verdict(requests=len(outcomes))
    for o in outcomes:
        verdict.by_kind[o.kind] += 1
        if o.kind == "chain" and any(start <= o.at <= end for start, end in windows):
            verdict.excused["ok" if o.ok else "refused" if o.refused else "failed"] += 1
            verdict.ok += o.ok
            continue
        if o.ok:
            verdict.ok += 1
        elif o.refused:
            verdict.wrong_refusals.append(o)
        else:
            verdict.lost.append(o)
    return verdict


def memory(samples: Sequence[Sample], warmup: float, end: float) -> dict[str, dict[str, float]]:
    """Per process: RSS after warm-up, at the end, the growth, the peak, and file descriptors."""
    stretch = max((end - warmup) * 0.15, 1.0)
    found: dict[str, dict[str, float]] = {}
    for process in sorted({s.process for s in samples}):
        mine = [s for s in samples if s.process == process and s.at >= warmup]
        if not mine:
            continue
        first = [s.rss_mb for s in mine if s.at <= warmup + stretch] or [mine[0].rss_mb]
        last = [s.rss_mb for s in mine if s.at >= end - stretch] or [mine[-1].rss_mb]
        start_mb, end_mb = statistics.median(first), statistics.median(last)
        growth = end_mb - start_mb
        found[process] = {
            "rss_start_mb": start_mb,
            "rss_end_mb": end_mb,
            "rss_peak_mb": max(s.rss_mb for s in mine),
            "growth_mb": growth,
            "flat": float(growth < FLAT_MB or growth < FLAT_SHARE * start_mb),
            "fds_start": float(mine[0].fds),
            "fds_end": float(mine[-1].fds),
            "fds_peak": float(max(s.fds for s in mine)),
        }
    return found


_STAMP = re.compile(r"^\S+ \S+ ")  # "2026-11-30 15:02:22,123 "
_NUMBERS = re.compile(r"\d+")


def log_lines(path: Path) -> dict[str, object]:
    """Tracebacks, ERROR and WARNING lines of one log, with the commonest ERROR messages."""
    text = path.read_text(errors="replace") if path.exists() else ""
    errors: Counter[str] = Counter()
    warnings = tracebacks = 0
    for line in text.splitlines():
        if line.startswith("Traceback "):
            tracebacks += 1
        elif " ERROR " in line or " CRITICAL " in line or re.match(r"^[EF]\d{4} ", line):
            errors[_NUMBERS.sub("N", _STAMP.sub("", line))[:140]] += 1
        elif " WARNING " in line:
            warnings += 1
    return {
        "tracebacks": tracebacks,
        "errors": sum(errors.values()),
        "warnings": warnings,
        "top_errors": errors.most_common(3),
    }


def series(
    samples: Sequence[Sample], step: float
) -> list[tuple[float, dict[str, tuple[float, int]]]]:
    """(time, {process: (rss, fds)}) every `step` seconds: the last sample at or before it."""
    if not samples:
        return []
    end = max(s.at for s in samples)
    rows = []
    t = 0.0
    while t <= end + 1e-9:
        row = {}
        for s in samples:
            if s.at <= t + 1e-9:
                row[s.process] = (s.rss_mb, s.fds)
        rows.append((t, row))
        t += step
    return rows
