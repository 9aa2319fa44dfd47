"""`ccb netinit` in a real network namespace: the app's TCP goes to the sidecar, its own not."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.pods.netlab import Lab, Pod, run

pytestmark = pytest.mark.pods

PROBE = str(Path(__file__).with_name("tcp_probe.py"))
PROXY_UID = 1337


def ask(lab: Lab, pod: Pod, host: str, port: int, uid: int | None = None) -> str:
    return run(pod.exec_argv([sys.executable, PROBE, "ask", host, str(port)], uid)).strip()


def wait_answer(lab: Lab, pod: Pod, host: str, port: int, expected: str) -> None:
    deadline = time.monotonic() + 20
    while (answer := ask(lab, pod, host, port)) != expected:
        assert time.monotonic() < deadline, f"{host}:{port} answered {answer!r}"
        time.sleep(0.1)


def netinit(lab: Lab, pod: Pod, *args: str) -> str:
    return lab.pod_exec(pod, [sys.executable, "-m", "cascadebreaker.cli", "netinit", *args])


def test_redirects_app_traffic_and_exempts_the_sidecar_uid(lab: Lab) -> None:
    app, remote = lab.add_pod("app"), lab.add_pod("remote")
    lab.spawn(app, [sys.executable, PROBE, "origdst", "15003"])
    lab.spawn(remote, [sys.executable, PROBE, "echo", "8080", "direct"])
    lab.spawn(remote, [sys.executable, PROBE, "echo", "6379", "direct"])
    wait_answer(lab, app, remote.address, 8080, "direct")
    wait_answer(lab, app, remote.address, 6379, "direct")

    args = ["--proxy-port", "15003", "--proxy-uid", str(PROXY_UID), "--exclude-ports", "6379"]
    netinit(lab, app, *args)
    netinit(lab, app, *args)  # a second run replaces, never duplicates
    rules = lab.pod_exec(app, ["iptables", "-t", "nat", "-S"])
    assert rules.count("-A OUTPUT -p tcp -j CCB_OUTPUT") == 1
    assert "--uid-owner 1337 -j RETURN" in rules

    # the app (root here, any uid but the sidecar's) is redirected, with its original destination
    assert ask(lab, app, remote.address, 8080) == f"redirected {remote.address}:8080"
    # the sidecar's uid goes out untouched, and so do excluded ports and loopback
    assert ask(lab, app, remote.address, 8080, uid=PROXY_UID) == "direct"
    assert ask(lab, app, remote.address, 6379) == "direct"
    assert ask(lab, app, "127.0.0.1", 15003).startswith("redirected 127.0.0.1:15003")
    # nothing changed in the other pod
    assert "CCB_OUTPUT" not in lab.pod_exec(remote, ["iptables", "-t", "nat", "-S"])

    netinit(lab, app, "--clean")
    assert "CCB_OUTPUT" not in lab.pod_exec(app, ["iptables", "-t", "nat", "-S"])
    assert ask(lab, app, remote.address, 8080) == "direct"
    netinit(lab, app, "--clean")  # cleaning twice is fine


def test_bad_arguments_are_refused_before_touching_iptables(lab: Lab) -> None:
    app = lab.add_pod("app")
    from tests.pods.netlab import run

    out = run(
        app.exec_argv(
            [sys.executable, "-m", "cascadebreaker.cli", "netinit", "--exclude-ports", "80,x"]
        ),
        check=False,
    )
    assert out == ""
    assert "CCB_OUTPUT" not in lab.pod_exec(app, ["iptables", "-t", "nat", "-S"])
