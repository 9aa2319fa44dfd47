"""The transparent listener on its own: routed, relayed and refused destinations."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.pods.netlab import Lab, Pod, run
from tests.pods.shop import Driver, eventually

pytestmark = pytest.mark.pods

PROBE = str(Path(__file__).with_name("tcp_probe.py"))
CCB = [sys.executable, "-m", "cascadebreaker.cli"]


def start_sidecar(lab: Lab, app: Pod, upstream: Pod, unknown: str) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="ccbpod-transparent-"))
    os.chmod(folder, 0o755)
    config = {
        "service": "checkout",
        "listen": {
            "inbound": None,
            "grpc": None,
            "outbound": "127.0.0.1:15001",
            "admin": "127.0.0.1:15000",
            "transparent": "127.0.0.1:15003",
        },
        "interception": {"unknown_destinations": unknown},
        "upstreams": {"payment": {"url": f"http://{upstream.address}:8080", "timeout": 5}},
    }
    path = folder / "sidecar.yaml"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o644)
    lab.pod_exec(app, [*CCB, "netinit", "--proxy-port", "15003", "--proxy-uid", "1337"])
    lab.spawn(app, [*CCB, "sidecar", "--config", str(path)], uid=1337, log=folder / "log")
    return folder


def ask(pod: Pod, host: str, port: int) -> str:
    return run(pod.exec_argv([sys.executable, PROBE, "ask", host, str(port)])).strip()


@pytest.mark.parametrize("unknown", ["relay", "refuse"])
def test_upstreams_are_routed_and_other_destinations_relayed_or_refused(
    lab: Lab, unknown: str
) -> None:
    app, remote = lab.add_pod("app"), lab.add_pod("remote")
    lab.spawn(remote, [sys.executable, "-m", "http.server", "8080", "--directory", "/"])
    lab.spawn(remote, [sys.executable, PROBE, "echo", "9090", "raw bytes back"])
    assert eventually(lambda: ask(app, remote.address, 9090) == "raw bytes back")
    start_sidecar(lab, app, remote, unknown)
    client = Driver(lab, app)  # runs as root in the app's pod: intercepted
    admin = "http://127.0.0.1:15000"
    assert eventually(lambda: client.call("GET", f"{admin}/readyz")["status"] == 200)

    # the app dials payment's address itself; the sidecar's route answers
    answer = client.call("GET", f"http://{remote.address}:8080/")
    assert answer["status"] == 200
    status = client.call("GET", f"{admin}/status")["body"]
    assert status["transparent"]["connections"]["routed"] == 1
    assert status["breakers"]["payment"]["state"] == "CLOSED"

    # a destination that is no upstream: relayed untouched, or refused
    if unknown == "relay":
        assert ask(app, remote.address, 9090) == "raw bytes back"
    else:
        assert ask(app, remote.address, 9090) == "error ConnectionResetError"
    connections = client.call("GET", f"{admin}/status")["body"]["transparent"]["connections"]
    assert connections[{"relay": "relayed", "refuse": "refused"}[unknown]] == 1

    # dialling the transparent port directly is no redirect: refused, the sidecar lives on
    assert ask(app, "127.0.0.1", 15003) == "error ConnectionResetError"
    assert client.call("GET", f"{admin}/healthz")["status"] == 200
