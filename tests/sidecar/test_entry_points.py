"""`python -m cascadebreaker.sidecar` takes the same arguments as `ccb sidecar`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml


@pytest.mark.parametrize(
    "command",
    [
        [sys.executable, "-m", "cascadebreaker.sidecar"],
        [sys.executable, "-m", "cascadebreaker.cli", "sidecar"],
    ],
    ids=["python -m cascadebreaker.sidecar", "ccb sidecar"],
)
def test_both_entry_points_read_the_config_and_listener_overrides(
    command: list[str], tmp_path: Path
) -> None:
    """An invalid listener override is a config error (exit 2) naming it, in both."""
    path = tmp_path / "sidecar.yaml"
    path.write_text(yaml.safe_dump({"service": "checkout", "listen": {"inbound": None}}))
    done = subprocess.run(
        [*command, "--config", str(path), "--listen", "nope=1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "--listen nope=1: must be NAME=HOST:PORT" in done.stderr
    assert "Traceback" not in done.stderr
