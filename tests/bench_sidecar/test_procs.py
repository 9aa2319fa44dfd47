"""CPU readings of the processes under test: exact totals, split by the ticks."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.sidecar.procs import CpuReading


def test_a_span_is_the_exact_total_shared_out_as_the_ticks_share_it() -> None:
    before = CpuReading(exact=1.0, user=0.8, system=0.2)
    after = CpuReading(exact=1.5, user=1.1, system=0.4)  # ticks: 0.3 user, 0.2 system
    user, system = after.split(before)
    assert user == pytest.approx(0.3) and system == pytest.approx(0.2)
    after = CpuReading(exact=1.25, user=1.1, system=0.4)  # exact says 0.25, ticks 0.5
    user, system = after.split(before)
    assert user == pytest.approx(0.15) and system == pytest.approx(0.1)


def test_without_an_exact_total_the_ticks_are_the_answer() -> None:
    before = CpuReading(exact=None, user=0.8, system=0.2)
    after = CpuReading(exact=2.0, user=1.1, system=0.4)
    assert after.split(before) == pytest.approx((0.3, 0.2))
    # A thread that ended took its on-CPU time with it: the exact span is negative.
    assert CpuReading(0.5, 1.1, 0.4).split(before) == pytest.approx((0.3, 0.2))
    # No ticks in the span: all of it counts as user time.
    assert CpuReading(1.004, 0.8, 0.2).split(CpuReading(1.0, 0.8, 0.2)) == pytest.approx(
        (0.004, 0.0)
    )


def test_a_real_process_reads_the_same_cpu_both_ways() -> None:
    """The scheduler's nanoseconds and the clock ticks count one process's CPU: read while it
    waits (its counters still), they agree within the ticks' grain."""
    burn = "import sys\nsum(range(5_000_000))\nprint('done', flush=True)\nsys.stdin.read()"
    child = subprocess.Popen(
        [sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline() == "done\n"
        reading = CpuReading.of(child.pid)
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    assert reading.exact is not None, "no schedstat on this kernel"
    ticks = reading.user + reading.system
    assert reading.exact > 0.02  # the start-up and the sum: tens of milliseconds at least
    assert abs(reading.exact - ticks) <= 0.03  # a tick is 10 ms; the split rounds each way
    user, system = reading.split()
    assert user + system == pytest.approx(reading.exact)
