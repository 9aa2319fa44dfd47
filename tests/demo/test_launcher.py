"""The launcher: processes come up healthy and none survive the demo, however it ends."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from cascadebreaker.demo.launcher import DemoSystem, LaunchError, pid_alive

from .conftest import FAST, eventually

pytestmark = pytest.mark.slow


def test_stop_leaves_no_process_behind_and_removes_the_workdir() -> None:
    system = DemoSystem.create("direct", FAST)
    system.start()
    pids = system.pids()
    assert set(pids) == set(system.topology.services)

    system.stop()

    assert not any(pid_alive(pid) for pid in pids.values())
    assert not system.workdir.exists()


_LAUNCHER = """
import json, sys, time
from cascadebreaker.demo.launcher import DemoSystem
system = DemoSystem.create("direct")
system.start()
print(json.dumps(system.pids()), flush=True)
time.sleep(600)
"""


def test_children_die_with_a_killed_launcher() -> None:
    # SIGKILL leaves the launcher no chance to clean up: the children must go by themselves.
    launcher = subprocess.Popen(
        [sys.executable, "-c", _LAUNCHER],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert launcher.stdout is not None
        pids = json.loads(launcher.stdout.readline())
        assert len(pids) == 8
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=10)

        assert eventually(lambda: not any(pid_alive(p) for p in pids.values()))
    finally:
        if launcher.poll() is None:
            launcher.kill()


def test_a_service_that_cannot_start_fails_the_launch_with_its_log() -> None:
    system = DemoSystem.create("direct", FAST)
    with (
        _occupied(system.topology.service("courier").port),
        pytest.raises(LaunchError, match="courier exited"),
    ):
        system.start(timeout=60, attempts=1)

    spawned = [p.pid for p in system.processes.values() if p.pid is not None]
    assert len(spawned) == 8
    assert not any(pid_alive(pid) for pid in spawned)
    assert not system.workdir.exists()


def test_a_port_taken_before_launch_is_replaced_by_a_fresh_one() -> None:
    system = DemoSystem.create("direct", FAST)
    taken = system.topology.service("courier").port
    with _occupied(taken):
        system.start(timeout=60)
    try:
        assert system.topology.service("courier").port != taken
        assert set(system.pids()) == set(system.topology.services)
    finally:
        system.stop()


@contextlib.contextmanager
def _occupied(port: int) -> Iterator[None]:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", port))
        blocker.listen()
        yield
