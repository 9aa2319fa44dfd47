"""File descriptors are budgeted: a cap on client connections (503 past it), admin kept reachable,
the soft limit raised to the hard one, the counts in /metrics. Run under a low ulimit."""

from __future__ import annotations

import contextlib
import re
import resource
import select
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import SidecarProcess, Upstream, start_sidecar


def _ulimit(soft: int, hard: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return apply


def _metric(sidecar: SidecarProcess, name: str) -> float:
    text = httpx.get(sidecar.url("admin") + "/metrics", timeout=10).text
    match = re.search(rf"^{name} ([0-9.e+]+)$", text, re.MULTILINE)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


@contextlib.contextmanager
def _slow_clients(port: int, count: int, refusals: int) -> Iterator[list[bytes]]:
    """`count` connections that each send half a request head and wait; yields what each got
    back once `refusals` of them were answered (a 503 when refused, nothing while held)."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sockets.append(sock)
            with contextlib.suppress(OSError):  # a refused one may be closed already
                sock.sendall(b"GET /payment/x HTTP/1.1\r\n")
        answers = dict.fromkeys(sockets, b"")
        deadline = time.monotonic() + 30
        while sum(1 for a in answers.values() if a) < refusals:
            assert time.monotonic() < deadline, "the refusals did not all arrive"
            waiting = [sock for sock, answer in answers.items() if not answer]
            for sock in select.select(waiting, [], [], 1.0)[0]:
                with contextlib.suppress(OSError):
                    answers[sock] = sock.recv(65536) or b"(closed)"
        yield [answers[sock] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@pytest.fixture
def limited(tmp_path: Path, upstream: Upstream) -> Iterator[Callable[..., SidecarProcess]]:
    """Start sidecars with a given ulimit; stopped at the end."""
    started: list[SidecarProcess] = []

    def start(soft: int, hard: int, **extra: Any) -> SidecarProcess:
        sidecar = start_sidecar(
            tmp_path,
            {"payment": {"url": upstream.url}},
            preexec_fn=_ulimit(soft, hard),
            **extra,
        )
        started.append(sidecar)
        return sidecar

    yield start
    for sidecar in started:
        sidecar.stop()
        if sidecar.process.stderr is not None:
            sidecar.process.stderr.close()


def test_past_the_cap_new_connections_get_503_and_admin_still_answers(
    limited: Callable[..., SidecarProcess],
) -> None:
    sidecar = limited(256, 256, limits={"header_timeout": 60})
    cap = (256 - 128) // 2  # a client connection and its upstream one, after a reserve
    clients = 300  # more than the sidecar has descriptors
    with _slow_clients(sidecar.ports["outbound"], clients, clients - cap) as answers:
        # The data plane is full; the admin listener is not.
        assert httpx.get(sidecar.url("admin") + "/healthz", timeout=10).status_code == 200
        held = [a for a in answers if not a]
        refused = [a for a in answers if a]
        assert len(held) == cap
        assert len(refused) == clients - cap
        assert all(a.startswith(b"HTTP/1.1 503 ") for a in refused)
        assert b"too many connections" in refused[0]
        assert _metric(sidecar, "ccb_sidecar_client_connections") == cap
        assert _metric(sidecar, "ccb_sidecar_client_connections_max") == cap
        assert _metric(sidecar, "ccb_sidecar_client_connections_refused_total") == len(refused)
        assert sidecar.status()["clients"] == {"open": cap, "max": cap, "refused": len(refused)}
    # Room again once they are gone.
    response = httpx.get(sidecar.url("outbound") + "/payment/x", timeout=10)
    assert response.status_code == 200
    assert sidecar.stop() == 0
    assert sidecar.process.stderr is not None
    log = sidecar.process.stderr.read().decode()
    assert "client connection limit reached" in log
    assert log.count("client connection limit reached") <= 2  # rate-limited


def test_the_soft_limit_is_raised_to_the_hard_one(
    limited: Callable[..., SidecarProcess],
) -> None:
    hard = min(4096, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    sidecar = limited(256, hard)
    assert _metric(sidecar, "process_max_fds") == hard
    assert _metric(sidecar, "ccb_sidecar_client_connections_max") == (hard - 128) // 2


def test_a_configured_cap(limited: Callable[..., SidecarProcess]) -> None:
    sidecar = limited(256, 256, limits={"max_connections": 5})
    assert _metric(sidecar, "ccb_sidecar_client_connections_max") == 5
    with _slow_clients(sidecar.ports["outbound"], 7, 2) as answers:
        assert [bool(a) for a in answers] == [False] * 5 + [True] * 2


def test_a_configured_cap_beyond_the_descriptors_is_lowered(
    limited: Callable[..., SidecarProcess],
) -> None:
    sidecar = limited(256, 256, limits={"max_connections": 100000})
    assert _metric(sidecar, "ccb_sidecar_client_connections_max") == (256 - 128) // 2
    assert sidecar.stop() == 0
    assert sidecar.process.stderr is not None
    assert "limits.max_connections 100000" in sidecar.process.stderr.read().decode()
