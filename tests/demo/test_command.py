"""`ccb demo` and `ccb fault` as a user runs them: real processes, real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from cascadebreaker.cli import main
from cascadebreaker.demo.launcher import pid_alive

from .conftest import eventually

pytestmark = pytest.mark.slow


def _ccb(args: list[str], state: Path, **kwargs: object) -> subprocess.Popen[str]:
    env = {**os.environ, "CCB_DEMO_STATE": str(state), "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen(
        [sys.executable, "-m", "cascadebreaker.cli", *args],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        **kwargs,  # type: ignore[call-overload]
    )


def test_demo_story_runs_to_the_end_and_cleans_up(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    demo = _ccb(
        ["demo", "--mode", "plain", "--seconds", "1.0", "--rate", "8", "--recovery-timeout", "0.5"],
        state,
    )
    output, _ = demo.communicate(timeout=120)

    assert demo.returncode == 0, output
    for chapter in ("healthy", "courier down", "courier back"):
        assert chapter in output
    assert "POST http://127.0.0.1:" in output  # the public entry is printed
    assert not state.exists()


def test_fault_commands_switch_a_running_demo_and_sigterm_stops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state.json"
    demo = _ccb(["demo", "--mode", "plain", "--no-story", "--keep-running"], state)
    try:
        assert eventually(state.exists, deadline=60), "the demo never wrote its state file"
        recorded = json.loads(state.read_text())
        courier = recorded["topology"]["services"]["courier"]["port"]
        fault_url = f"http://127.0.0.1:{courier}/_fault"
        monkeypatch.setenv("CCB_DEMO_STATE", str(state))

        assert main(["fault", "inject", "courier", "--mode", "errors=0.25"]) == 0
        fault = httpx.get(fault_url, trust_env=False).json()["fault"]
        assert (fault["mode"], fault["rate"]) == ("errors", 0.25)

        assert main(["fault", "inject", "courier", "--mode", "slow", "--delay", "0.3"]) == 0
        assert httpx.get(fault_url, trust_env=False).json()["fault"]["delay"] == 0.3

        assert main(["fault", "clear"]) == 0
        assert httpx.get(fault_url, trust_env=False).json()["fault"] is None
        assert "cleared: courier, payment-gateway" in capsys.readouterr().out

        demo.send_signal(signal.SIGTERM)
        demo.wait(timeout=30)
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 0
    assert not any(pid_alive(pid) for pid in recorded["pids"].values())
    assert not state.exists()


def test_fault_without_a_running_demo_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CCB_DEMO_STATE", str(tmp_path / "absent.json"))

    assert main(["fault", "inject", "courier", "--mode", "down"]) == 2
    assert "no running demo" in capsys.readouterr().err


def test_fault_with_a_dead_launcher_in_the_state_file_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    finished = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"launcher_pid": int(finished.stdout), "topology": {}}))
    monkeypatch.setenv("CCB_DEMO_STATE", str(state))

    assert main(["fault", "clear"]) == 2
    assert "no longer running" in capsys.readouterr().err


@pytest.mark.parametrize("spec", ["melted", "errors=2", "errors=lots"])
def test_fault_rejects_bad_modes(
    spec: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("CCB_DEMO_STATE", str(tmp_path / "absent.json"))

    assert main(["fault", "inject", "courier", "--mode", spec]) == 2
    assert "fault" in capsys.readouterr().err
