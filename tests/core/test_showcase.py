"""`ccb showcase` runs end to end as a real process against a real loopback upstream."""

from __future__ import annotations

import subprocess
import sys


def test_showcase_trips_and_recovers() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "cascadebreaker.cli",
            "showcase",
            "--recovery",
            "0.3",
            "--interval",
            "0.01",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "CLOSED -> OPEN (3 consecutive failures)" in out
    assert "OPEN -> HALF_OPEN" in out
    assert "HALF_OPEN -> CLOSED" in out
    assert "final state CLOSED" in out
