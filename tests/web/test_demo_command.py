"""`ccb demo web` and `ccb fault` on it, as a user runs them: real processes, real signals."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cascadebreaker.cli import main
from cascadebreaker.demo.launcher import pid_alive

from .demo_process import WebDemoProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDemoProcess]:
    running = WebDemoProcess(
        tmp_path_factory.mktemp("web-demo"), "--failure-threshold", "1", "--recovery-timeout", "60"
    )
    yield running
    running.stop()


@pytest.fixture
def against(demo: WebDemoProcess, monkeypatch: pytest.MonkeyPatch) -> WebDemoProcess:
    """In-process `ccb` calls go to `demo` (its state file)."""
    monkeypatch.setenv("CCB_DEMO_STATE", str(demo.state))
    return demo


def test_it_prints_the_page_and_records_its_addresses(demo: WebDemoProcess) -> None:
    output = demo.output()

    assert f"settlement report: {demo.url}" in output
    assert "ccb fault inject settlement-api --mode down|slow|errors" in output
    recorded = demo.recorded
    assert recorded["public_url"] == f"http://127.0.0.1:{demo.port}"
    assert recorded["topology"]["entry"] == "web"
    assert set(recorded["pids"]) == {"settlement-api", "web"}
    assert demo.http.get(f"{demo.api_url}/healthz").json()["service"] == "settlement-api"


def test_fault_commands_find_the_settlement_api(
    against: WebDemoProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    fault_url = f"{against.api_url}/_fault"

    assert main(["fault", "inject", "settlement-api", "--mode", "errors=0.25"]) == 0
    fault = against.http.get(fault_url).json()["fault"]
    assert (fault["mode"], fault["rate"]) == ("errors", 0.25)

    assert main(["fault", "inject", "settlement-api", "--mode", "slow", "--delay", "0.3"]) == 0
    assert against.http.get(fault_url).json()["fault"]["delay"] == 0.3

    assert main(["fault", "clear"]) == 0
    assert against.http.get(fault_url).json()["fault"] is None
    assert "cleared: settlement-api" in capsys.readouterr().out


def test_a_saga_upstream_is_not_in_the_web_demo(
    against: WebDemoProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fault", "inject", "courier", "--mode", "down"]) == 2
    assert "has no courier" in capsys.readouterr().err


def test_the_json_api_answers_the_503_contract_while_open(against: WebDemoProcess) -> None:
    api = f"http://127.0.0.1:{against.port}/api/settlements"
    assert against.http.get(api).status_code == 200
    against.ccb("fault", "inject", "settlement-api", "--mode", "down")
    try:
        failed = against.http.get(api)  # the failure that opens the circuit (threshold 1)
        rejected = against.http.get(api)
    finally:
        against.ccb("fault", "clear")

    assert (failed.status_code, failed.json()["error"]) == (502, "upstream_error")
    assert rejected.status_code == 503
    assert 1 <= int(rejected.headers["retry-after"]) <= 60
    assert rejected.json()["circuitState"] == "OPEN"
    page = against.http.get(against.url)  # the Inertia page stays a 200
    assert page.status_code == 200


def test_a_second_demo_on_the_same_state_file_refuses_to_start(demo: WebDemoProcess) -> None:
    second = subprocess.run(
        [sys.executable, "-m", "cascadebreaker.cli", "demo", "web", "--port", "0"],
        env=demo.env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert second.returncode == 2  # --port 0 is refused before anything starts
    second = subprocess.run(
        [sys.executable, "-m", "cascadebreaker.cli", "demo", "web", "--port", str(demo.port + 1)],
        env=demo.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode == 1
    assert "another demo" in second.stderr
    assert json.loads(demo.state.read_text())["launcher_pid"] == demo.process.pid


def test_a_taken_port_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CCB_DEMO_STATE", str(tmp_path / "state.json"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "cascadebreaker.cli", "demo", "web", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert f"port {port} is in use" in done.stderr


def test_sigterm_stops_every_process_and_removes_the_state_file(tmp_path: Path) -> None:
    demo = WebDemoProcess(tmp_path)
    pids = demo.recorded["pids"].values()

    demo.stop()

    assert demo.process.returncode == 0
    assert not any(pid_alive(pid) for pid in pids)
    assert not demo.state.exists()
    with pytest.raises(httpx.ConnectError):
        httpx.get(demo.url, trust_env=False)
