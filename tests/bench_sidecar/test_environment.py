"""The run's header: what the numbers were measured on, with a yardstick for other machines."""

from __future__ import annotations

import re

from bench.sidecar import run


def test_the_header_names_the_cpu_and_the_interpreters_speed() -> None:
    env = run.environment(3, 3.0, 0.5)
    assert re.fullmatch(r"\S+, \d+ CPUs \(.+\), \S+ \S+", env["machine"])
    speed = re.search(r"; ([0-9.]+) µs per sum\(range\(1000\)\)$", env["python"])
    assert speed is not None, env["python"]
    assert 0.1 < float(speed.group(1)) < 10_000
    assert env["load average before the run"] == "0.50"
