"""A 30-second chaos run (`python -m bench chaos`, small): real sidecars on a real Redis that is
killed and frozen, a peer killed and restarted, slow and fuzzing clients. It asserts outcomes,
never timings: no well-formed request to a healthy path lost, no traceback, no fuzzed request
left hanging, every sidecar drains and exits 0 (the full 10-minute figures are in
docs/reliability.md).

Wrong refusals are reported, not asserted: on a loaded machine the failing endpoint's first
5xx can complete back to back and open the caller's one breaker for the whole upstream for a
few seconds (docs/reliability.md, "Open"), so their count depends on timing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.chaos.run import main

pytestmark = pytest.mark.slow


def test_a_short_chaos_run_loses_nothing(tmp_path: Path) -> None:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is required (Debian package redis-server)")
    figures = tmp_path / "figures.json"
    argv = ["--minutes", "0.5", "--rate", "30", "--slow-clients", "200", "--fuzz-rate", "10"]
    main([*argv, "--workdir", str(tmp_path / "run"), "--json", str(figures)])  # 1: see above
    found = json.loads(figures.read_text())
    assert found["events"] == ["kill redis", "freeze redis", "kill peer"]
    assert found["requests"] > 500 and found["fuzz_sent"] > 50
    assert found["lost"] == 0, found
    assert set(found["exit_codes"].values()) == {0}, found
    assert not any(found["tracebacks"].values()), found
    assert found["fuzz_hung"] == 0 and found["shed"] == 0, found
