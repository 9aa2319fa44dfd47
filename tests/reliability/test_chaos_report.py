"""The chaos run's pure parts: its timeline, verdicts, memory figures and log reading.

The run itself (`python -m bench chaos`) is a benchmark, not a test; these check that it calls
a lost request lost, excuses only what it broke, and reads tracebacks out of a log.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from bench.chaos.load import Outcome
from bench.chaos.report import Event, Sample, judge, log_lines, memory
from bench.chaos.run import timeline


def test_timeline_breaks_each_thing_and_ends_before_the_run() -> None:
    for seconds in (60, 600, 1800):
        events = timeline(seconds)
        assert {e.what for e in events} == {"kill redis", "freeze redis", "kill peer"}
        assert all(e.at + e.seconds < seconds * 0.95 for e in events)
        assert all(a.at + a.seconds <= b.at for a, b in itertools.pairwise(events))
    assert len(timeline(600)) == 9  # three cycles in ten minutes


def test_judge_excuses_only_the_chain_around_a_peer_outage() -> None:
    events = [Event(100, "kill peer", 10), Event(200, "kill redis", 20)]
    outcomes = [
        Outcome(50, "charge", 200, False, True),
        Outcome(105, "chain", 503, True, False),  # refused early while ledger is down: excused
        Outcome(112, "chain", 502, False, False),  # failed just after: excused (grace)
        Outcome(105, "charge", 503, True, False),  # a healthy path refused: wrong
        Outcome(205, "create", 0, False, False, "TimeoutError()"),  # Redis down: must not fail
        Outcome(300, "chain", 502, False, False),  # long after the peer came back: lost
    ]
    verdict = judge(outcomes, events, grace=10)
    assert verdict.requests == 6 and verdict.ok == 1
    assert verdict.excused == {"refused": 1, "failed": 1}
    assert [o.at for o in verdict.wrong_refusals] == [105]
    assert [o.at for o in verdict.lost] == [205, 300]


def test_memory_compares_after_warmup_with_the_end() -> None:
    flat = [Sample(t, "checkout", 80 + (t % 3), 40) for t in range(0, 600, 5)]
    growing = [Sample(t, "payment", 80 + t / 10, 40 + t) for t in range(0, 600, 5)]
    found = memory(flat + growing, warmup=60, end=600)
    assert found["checkout"]["flat"] == 1.0
    assert found["payment"]["flat"] == 0.0
    assert found["payment"]["growth_mb"] > 40
    assert found["payment"]["fds_peak"] == 635


def test_log_lines_count_tracebacks_errors_and_warnings(tmp_path: Path) -> None:
    log = tmp_path / "payment-sidecar.log"
    log.write_text(
        "2026-11-30 15:07:31,296 INFO x: up\n"
        "2026-11-30 15:07:40,523 WARNING cascadebreaker.redis: Redis unreachable\n"
        "2026-11-30 15:07:41,000 ERROR cascadebreaker.sidecar: request 17 failed\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "ValueError: boom\n"
        "2026-11-30 15:07:42,000 ERROR cascadebreaker.sidecar: request 18 failed\n"
        "E1130 15:07:43.000000 1 chttp2_transport.cc:1] something\n"
    )
    found = log_lines(log)
    assert (found["tracebacks"], found["errors"], found["warnings"]) == (1, 3, 1)
    assert found["top_errors"][0] == ("ERROR cascadebreaker.sidecar: request N failed", 2)
    assert log_lines(tmp_path / "missing.log")["tracebacks"] == 0
