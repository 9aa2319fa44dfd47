"""The NATS update bus against a real `nats-server` started here: delivery to dependents only,
no echo, replay by version on connect and after an outage, malformed messages counted."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import nats
import pytest

from cascadebreaker.cascade import AvailabilityUpdate, Cause, Endpoint
from cascadebreaker.sidecar.mesh.nats_bus import NatsBus, subject

B = Endpoint("B", "GET", "/b")


def unavailable(version: int, instance: str = "b-1") -> AvailabilityUpdate:
    chain = (Cause(Endpoint.service_wide("Z"), "circuit open"), Cause(B, "requires Z * *"))
    expires_at = round(time.time() + 60, 3)  # what the wire keeps
    return AvailabilityUpdate("B", B, False, chain, expires_at, version, instance=instance)


async def until(check: Callable[[], bool], what: str, deadline: float = 30.0) -> None:
    end = time.monotonic() + deadline
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"not true within {deadline}s: {what}")
        await asyncio.sleep(0.02)


@dataclass
class Member:
    """One sidecar's bus, with what it received and what it would answer a sync with."""

    bus: NatsBus
    received: list[AvailabilityUpdate] = field(default_factory=list)
    state: list[AvailabilityUpdate] = field(default_factory=list)
    malformed: int = 0


@pytest.fixture
def server(own_nats_server: Any) -> Any:
    """A nats-server of our own (stopped and started by the outage test)."""
    return own_nats_server


@pytest.fixture
async def members(server: Any) -> AsyncIterator[Callable[..., Member]]:
    made: list[Member] = []

    def make(service: str, upstreams: list[str], namespace: str = "t") -> Member:
        member: Member

        def malformed() -> None:
            member.malformed += 1

        bus = NatsBus(
            server.url,
            namespace,
            service,
            upstreams,
            lambda since: [u for u in member.state if u.version > since],
            lambda update: member.received.append(update),
            malformed,
        )
        member = Member(bus)
        bus.start()
        made.append(member)
        return member

    yield make
    for member in made:
        member.bus.close()
    await asyncio.sleep(0.05)  # let the closes run


async def test_a_change_reaches_dependents_and_siblings_only(
    members: Callable[..., Member],
) -> None:
    b1, b2 = members("B", ["Z"]), members("B", ["Z"])
    a, c = members("A", ["B"]), members("C", ["X"])
    await until(lambda: all(m.bus.connected for m in (a, b1, b2, c)), "connected")
    update = unavailable(1)
    b1.bus.publish([update])
    await until(lambda: a.received == [update] and b2.received == [update], "A and B2 hear it")
    await asyncio.sleep(0.2)  # give a wrong delivery its chance to show
    assert c.received == []  # C does not depend on B
    assert b1.received == []  # no echo of our own message
    assert b1.bus.published == 1


async def test_a_late_dependent_gets_the_current_state_by_sync(
    members: Callable[..., Member],
) -> None:
    b = members("B", [])
    b.state = [unavailable(5)]
    await until(lambda: b.bus.connected, "B connected")
    a = members("A", ["B"])
    await until(lambda: a.received == b.state, "A replayed B's state")
    assert b.bus.syncs_answered == 1


async def test_after_an_outage_the_bus_reconnects_and_asks_for_what_it_missed(
    server: Any, members: Callable[..., Member]
) -> None:
    a, b = members("A", ["B"]), members("B", [])
    await until(lambda: a.bus.connected and b.bus.connected, "connected")
    server.stop()
    await until(lambda: not a.bus.connected and not b.bus.connected, "outage noticed")
    missed = unavailable(time.time_ns() // 1000)
    b.state = [missed]  # sent while NATS was down: dropped, but B's state holds it
    b.bus.publish([missed])
    server.start()
    await until(lambda: a.bus.reconnects >= 1 and b.bus.reconnects >= 1, "reconnected", 30)
    await until(lambda: missed in a.received, "A got the missed update by sync", 30)
    later = unavailable(missed.version + 1)
    b.bus.publish([later])
    await until(lambda: later in a.received, "live again")


async def test_malformed_messages_are_counted_not_fatal(
    server: Any, members: Callable[..., Member]
) -> None:
    a = members("A", ["B"])
    await until(lambda: a.bus.connected, "connected")
    raw = await nats.connect(server.url)
    try:
        await raw.publish(subject("t", "u", "B"), b"not json")
        await raw.publish(subject("t", "sync", "A"), b"{}", reply="_INBOX.x")
        await raw.flush()
    finally:
        await raw.close()
    await until(lambda: a.malformed == 2, "both counted")
    good = unavailable(9)
    b = members("B", [])
    await until(lambda: b.bus.connected, "B connected")
    b.bus.publish([good])
    await until(lambda: good in a.received, "A still listening")


def test_subjects_keep_service_names_with_dots_in_one_token() -> None:
    assert subject("ns", "u", "pay.v2") == "ccb.cascade.ns.u.pay~v2"
    assert subject("ns", "sync", "B") == "ccb.cascade.ns.sync.B"
