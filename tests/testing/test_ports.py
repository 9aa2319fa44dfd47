"""cascadebreaker.testing.ports: free ports below the range outgoing connections use."""

from __future__ import annotations

import random
import socket

import pytest

from cascadebreaker.testing import ports


def test_a_free_port_is_below_the_ephemeral_range_and_bindable() -> None:
    low, _high = ports.ephemeral_range()
    for _ in range(20):
        port = ports.free_port()
        assert 1024 <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_held_by_a_server_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # The held port is offered twice, then real picks follow. (Offering `taken + 1` third
    # failed once in CI: a port next to a kernel-chosen one can be any connection's.)
    real_pick = random.randrange
    offered: list[int] = []
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        held.listen()
        forced = iter([taken, taken])

        def pick(first: int, low: int) -> int:
            offered.append(next(forced, None) or real_pick(first, low))
            return offered[-1]

        monkeypatch.setattr(random, "randrange", pick)  # the module `ports` picks with
        monkeypatch.setattr(ports, "ephemeral_range", lambda: (taken + 2, 65535))
        port = ports.free_port()
        assert port != taken and offered[:2] == [taken, taken] and port == offered[-1]


def test_without_room_below_the_range_the_kernel_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "ephemeral_range", lambda: (1500, 65535))
    port = ports.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_a_port_handed_out_is_not_handed_out_again_before_its_server_binds_it() -> None:
    """A harness asks for all its ports first and starts its servers after: a port it was
    handed is still free until then, so the test bind alone would hand it out again (CI: two
    sidecars of one cascade test given one port, `address already in use`)."""
    handed = [ports.free_port() for _ in range(2000)]
    assert len(set(handed)) == len(handed)
