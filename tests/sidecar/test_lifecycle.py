"""Process lifecycle: invalid config exits 2 naming the key; SIGTERM drains then exits 0."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from cascadebreaker.sidecar.schema import parse_config

from .conftest import SidecarProcess, Upstream, sidecar_command


def run_with_config(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    """Run `ccb sidecar` on a config that should be refused."""
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    return subprocess.run(sidecar_command(path), capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (
            {
                "service": "a",
                "listen": {"inbound": None},
                "upstreams": {"payment": {"url": "http://127.0.0.1:1", "timeout": 0}},
            },
            "upstreams.payment.timeout: must be > 0",
        ),
        (
            {
                "service": "a",
                "listen": {"inbound": None},
                "upstreams": {"payment": {"url": "http://127.0.0.1:1", "tiemout": 2}},
            },
            "upstreams.payment.tiemout: unknown key",
        ),
        (
            {
                "service": "a",
                "listen": {"inbound": None},
                "upstreams": {"payment": {"url": "ftp://x"}},
            },
            "upstreams.payment.url: must be an http:// URL",
        ),
        (
            {"service": "a", "listen": {"inbound": None, "outbound": "nowhere"}},
            "listen.outbound: must be host:port",
        ),
        (
            {"service": "a", "listen": {"inbound": None}, "store": "mongodb://x"},
            "store: must be 'memory', a redis:// URL or redis+cluster://host:port",
        ),
        ({"service": "a"}, "app: required when listen.inbound is set"),
        ({"listen": {"inbound": None}}, "service: required"),
        (
            {
                "service": "a",
                "listen": {"inbound": None},
                "upstreams": {
                    "p": {"url": "http://127.0.0.1:1", "breaker": {"failure_threshold": 0}}
                },
            },
            "upstreams.p.breaker.failure_threshold: must be >= 1",
        ),
        (  # regression (issue 9): an unknown alternative was ignored silently
            {
                "service": "a",
                "listen": {"inbound": None},
                "upstreams": {"payment": {"url": "http://127.0.0.1:1"}},
                "cascade": {"alternatives": {"payment": "payment-backup"}},
            },
            "cascade.alternatives.payment: 'payment-backup' is not an upstream",
        ),
        (
            {
                "service": "a",
                "listen": {"inbound": None},
                "upstreams": {"payment": {"url": "http://127.0.0.1:1"}},
                "cascade": {"alternatives": {"paymnet": "payment"}},
            },
            "cascade.alternatives.paymnet: 'paymnet' is not an upstream (configured: payment)",
        ),
    ],
)
def test_invalid_config_exits_2_naming_the_key(
    tmp_path: Path, document: dict[str, Any], expected: str
) -> None:
    result = run_with_config(tmp_path, yaml.safe_dump(document))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert expected in lines[0]


@pytest.mark.parametrize("listener", ["inbound", "grpc", "outbound", "admin"])
def test_listening_beyond_loopback_needs_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listener: str
) -> None:
    monkeypatch.delenv("CCB_SECRET", raising=False)
    document: dict[str, Any] = {
        "service": "a",
        "app": "http://127.0.0.1:8000",
        "listen": {listener: "0.0.0.0:15999"},
    }
    result = run_with_config(tmp_path, yaml.safe_dump(document))
    assert result.returncode == 2
    assert f"allow_insecure: listen.{listener} 0.0.0.0:15999 is not loopback" in result.stderr
    for allowed in (
        {"allow_insecure": True},
        {"cascade": {"secret": "s"}},
        {"cascade": {"enabled": False}},
    ):
        parse_config({**document, **allowed})
    monkeypatch.setenv("CCB_SECRET", "from the environment")
    parse_config(document)


def test_unparseable_and_missing_config_exit_2(tmp_path: Path) -> None:
    assert run_with_config(tmp_path, "service: [unclosed").returncode == 2
    missing = subprocess.run(
        sidecar_command(tmp_path / "absent.yaml"), capture_output=True, text=True, timeout=60
    )
    assert missing.returncode == 2
    assert "absent.yaml" in missing.stderr


def test_sigterm_drains_in_flight_requests_then_exits_0(
    sidecar_factory: Any, upstream: Upstream
) -> None:
    sidecar: SidecarProcess = sidecar_factory(
        {"payment": {"url": upstream.url, "timeout": 10}}, shutdown_grace=10
    )
    result: dict[str, Any] = {}

    def slow_call() -> None:
        response = httpx.get(sidecar.url("outbound") + "/payment/hang", timeout=20)
        result["status"] = response.status_code
        result["body"] = response.text

    caller = threading.Thread(target=slow_call)
    caller.start()
    deadline = time.monotonic() + 10
    while upstream.state.in_flight == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert upstream.state.in_flight == 1
    sidecar.process.send_signal(signal.SIGTERM)
    # Draining: readiness is withdrawn and new connections are refused.
    deadline = time.monotonic() + 10
    refused = False
    while time.monotonic() < deadline and not refused:
        try:
            with socket.create_connection(("127.0.0.1", sidecar.ports["outbound"]), timeout=1):
                time.sleep(0.02)
        except OSError:
            refused = True
    assert refused
    assert sidecar.process.poll() is None  # still serving the in-flight request
    # The admin listener stays up: not ready, yet alive.
    ready = httpx.get(sidecar.url("admin") + "/readyz", timeout=5)
    assert ready.status_code == 503
    assert ready.json() == {"status": "not ready", "store": "connected"}  # draining
    assert httpx.get(sidecar.url("admin") + "/healthz", timeout=5).status_code == 200
    upstream.state.release.set()
    caller.join(timeout=20)
    assert result == {"status": 200, "body": "released"}
    assert sidecar.process.wait(timeout=20) == 0


def test_sigterm_grace_bounds_the_drain(sidecar_factory: Any, upstream: Upstream) -> None:
    sidecar: SidecarProcess = sidecar_factory(
        {"payment": {"url": upstream.url, "timeout": 30}}, shutdown_grace=0.5
    )
    errors: list[BaseException] = []

    def hung_call() -> None:
        try:
            httpx.get(sidecar.url("outbound") + "/payment/hang", timeout=30)
        except httpx.HTTPError as exc:
            errors.append(exc)

    caller = threading.Thread(target=hung_call)
    caller.start()
    deadline = time.monotonic() + 10
    while upstream.state.in_flight == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    sidecar.process.send_signal(signal.SIGTERM)
    assert sidecar.process.wait(timeout=20) == 0
    caller.join(timeout=20)
    assert len(errors) == 1  # the hung call was cut when the grace period ended


def test_slow_head_gets_408_and_idle_connections_close(
    sidecar_factory: Any, upstream: Upstream
) -> None:
    sidecar: SidecarProcess = sidecar_factory(
        {"payment": {"url": upstream.url}}, limits={"header_timeout": 0.5, "idle_timeout": 0.5}
    )
    port = sidecar.ports["outbound"]
    with socket.create_connection(("127.0.0.1", port), timeout=20) as slow:
        slow.sendall(b"GET /payment/x HTTP/1.1\r\nhost: x\r\n")  # and never the end of it
        data = b""
        while chunk := slow.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 408 ")
    with socket.create_connection(("127.0.0.1", port), timeout=20) as idle:
        idle.sendall(b"GET /payment/x HTTP/1.1\r\nhost: x\r\n\r\n")
        data = b""
        while not data.endswith(b"ok /x"):
            data += idle.recv(65536)
        assert idle.recv(65536) == b""  # closed by the sidecar once idle
    assert httpx.get(sidecar.url("outbound") + "/payment/x").status_code == 200


def test_lean_module_entry_point_validates_too(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "service: a\nlisten: {inbound: null}\nupstreams: {p: {url: 'http://h:1', timeout: 0}}\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "cascadebreaker.sidecar", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "upstreams.p.timeout: must be > 0" in result.stderr


def test_port_in_use_exits_1(sidecar_factory: Any, upstream: Upstream, tmp_path: Path) -> None:
    first: SidecarProcess = sidecar_factory({"payment": {"url": upstream.url}})
    second = yaml.safe_load(first.config_path.read_text())
    path = tmp_path / "second.yaml"
    path.write_text(yaml.safe_dump(second))  # the very same ports
    result = subprocess.run(sidecar_command(path), capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "cannot listen" in result.stderr
    assert first.process.poll() is None


def test_client_that_stops_reading_is_cut_loose(sidecar_factory: Any, upstream: Upstream) -> None:
    sidecar: SidecarProcess = sidecar_factory(
        {"payment": {"url": upstream.url, "timeout": 30}}, limits={"idle_timeout": 0.5}
    )

    def upstream_connections() -> int:
        count: int = sidecar.status()["breakers"]["payment"]["connections"]["open"]
        return count

    with socket.create_connection(("127.0.0.1", sidecar.ports["outbound"]), timeout=20) as stuck:
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stuck.sendall(b"GET /payment/big?size=50000000 HTTP/1.1\r\nhost: x\r\n\r\n")
        # ... and never reads. The sidecar holds an upstream connection for it, then lets go.
        deadline = time.monotonic() + 15
        while upstream_connections() == 0:
            assert time.monotonic() < deadline, "the request never reached the upstream"
            time.sleep(0.02)
        while upstream_connections() != 0:
            assert time.monotonic() < deadline, "the stuck client held its upstream for ever"
            time.sleep(0.05)
    assert httpx.get(sidecar.url("outbound") + "/payment/x", timeout=10).status_code == 200


_SLOW_START = """
import asyncio, json, sys
from cascadebreaker.sidecar import serve as serving
from cascadebreaker.sidecar.schema import parse_config
from cascadebreaker.sidecar.server import SidecarServer

class SlowStart(SidecarServer):
    async def start(self) -> None:
        print("starting", flush=True)
        await asyncio.sleep(float(sys.argv[2]))  # a slow store, TLS files, a big route table
        await super().start()

import cascadebreaker.sidecar.server as server_module
server_module.SidecarServer = SlowStart  # serve() looks it up when it runs
sys.exit(serving.serve(parse_config(json.loads(sys.argv[1]))))
"""


def test_sigterm_while_starting_drains_then_exits_0() -> None:
    """Regression: the stop handlers were installed only once every listener was up, so a
    SIGTERM during start-up (a rollout that changes its mind, a supervisor's timeout) killed the
    process by the signal's default action (-15), with listeners already accepting."""
    config = {
        "service": "a",
        "listen": {"inbound": None, "outbound": "127.0.0.1:0", "admin": "127.0.0.1:0"},
        "upstreams": {"u": {"url": "http://127.0.0.1:1"}},
    }
    process = subprocess.Popen(
        [sys.executable, "-c", _SLOW_START, json.dumps(config), "1.0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "starting"
        process.send_signal(signal.SIGTERM)
        _out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert "draining" in err


_RECORD_DISPOSITIONS = """
import json, signal, sys
set_to = []
_real_signal = signal.signal

def recording_signal(signum, handler):
    set_to.append((int(signum), handler))
    return _real_signal(signum, handler)

# Before anything imports uvloop or asyncio: the loops keep a reference to signal.signal.
signal.signal = recording_signal
from cascadebreaker.sidecar import serve as serving
from cascadebreaker.sidecar.schema import parse_config
import cascadebreaker.sidecar.server as server_module

class StopsOnceUp(server_module.SidecarServer):
    async def start(self) -> None:
        await super().start()
        self.request_stop()

server_module.SidecarServer = StopsOnceUp
code = serving.serve(parse_config(json.loads(sys.argv[1])))
defaults = {
    signal.SIG_DFL: "SIG_DFL",
    signal.SIG_IGN: "SIG_IGN",
    signal.default_int_handler: "default_int_handler",
}
print(json.dumps([[s, defaults.get(h, "other")] for s, h in set_to]), flush=True)
sys.exit(code)
"""


def test_the_stop_signals_never_fall_back_to_their_default_action_once_handled() -> None:
    """Regression: after the drain the loop's stop handlers were taken off and SIG_IGN put in
    their place. Taking them off restores SIGTERM's default action for a moment; the stop
    signals were blocked for it, but only in the main thread, and the gRPC threads took a
    repeated SIGTERM there and died by it (-15). From the first handler on, SIGTERM and SIGINT
    must never be set back to an action that kills the process."""
    config = {
        "service": "a",
        "listen": {"inbound": None, "outbound": "127.0.0.1:0", "admin": "127.0.0.1:0"},
        "upstreams": {"u": {"url": "http://127.0.0.1:1"}},
    }
    done = subprocess.run(
        [sys.executable, "-c", _RECORD_DISPOSITIONS, json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    set_to: list[list[Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    for stop_signal in (signal.SIGTERM, signal.SIGINT):
        actions = [action for signum, action in set_to if signum == stop_signal]
        assert "other" in actions, f"{stop_signal.name} was never handled: {set_to}"
        after_handled = actions[actions.index("other") :]
        assert "SIG_DFL" not in after_handled, f"{stop_signal.name}: {actions}"
        assert "default_int_handler" not in after_handled, f"{stop_signal.name}: {actions}"
