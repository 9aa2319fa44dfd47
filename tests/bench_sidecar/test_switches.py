"""bench/sidecar/switches.py: /proc counters read into switches and CPU per Call."""

from __future__ import annotations

import os
from pathlib import Path

from bench.sidecar.switches import ThreadTally, per_call, read_tally, tallies

STATUS = """\
Name:\tevent_engine
State:\tS (sleeping)
voluntary_ctxt_switches:\t1207
nonvoluntary_ctxt_switches:\t33
"""
STAT = "4242 (python (x) y) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 40 0 0 20 0 9 0"


def test_a_thread_s_counters_are_read_past_a_name_with_spaces_and_parentheses() -> None:
    assert read_tally(STATUS, STAT) == ThreadTally("event_engine", 1207, 33, 290)


def test_threads_that_barely_switched_are_left_out_and_the_busiest_comes_first() -> None:
    tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
    before = {"1": ThreadTally("python", 10, 5, 100), "2": ThreadTally("pool", 0, 0, 0)}
    after = {
        "1": ThreadTally("python", 3010, 1005, 100 + 30),
        "2": ThreadTally("pool", 40, 0, 1),  # 0.04 a Call: idle
        "3": ThreadTally("event_engine", 1000, 0, 3),  # born during the run
    }
    rows = per_call(before, after, 1000)
    assert [name for name, *_ in rows] == ["python", "event_engine"]
    assert rows[0][1:3] == (3.0, 1.0)
    assert abs(rows[0][3] - 30 * tick_us / 1000) < 1e-9


def test_this_process_s_own_threads_are_read() -> None:
    main_thread = tallies(os.getpid())[str(os.getpid())]
    assert main_thread.name == Path("/proc/self/comm").read_text().strip()
