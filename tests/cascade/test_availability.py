"""The availability rules across several sidecars' tables (updates delivered in memory)."""

from __future__ import annotations

import pytest

from cascadebreaker.cascade import (
    AvailabilityTable,
    AvailabilityUpdate,
    Cause,
    DependencyGraph,
    Endpoint,
    Verdict,
    sign,
)

from .helpers import FakeClock, Mesh, ep


def chain_of(table: AvailabilityTable, endpoint: str) -> list[str]:
    """The cause chain of an unavailable endpoint, as strings, root first."""
    u = table.check(ep(endpoint))
    assert u is not None, f"{endpoint} should be unavailable"
    return [str(c.endpoint) for c in u.cause_chain]


@pytest.fixture
def chain(mesh: Mesh) -> Mesh:
    """A GET /a -> B GET /b -> C GET /c -> D GET /d, each edge learned by the caller."""
    mesh.edge("a GET /a", "b GET /b")
    mesh.edge("b GET /b", "c GET /c")
    mesh.edge("c GET /c", "d GET /d")
    mesh.table("d")
    return mesh


def test_nothing_is_refused_while_everything_is_healthy(chain: Mesh) -> None:
    for name, table in chain.tables.items():
        assert table.unavailable() == {}
        assert table.check(ep(f"{name} GET /{name}")) is None
    assert chain.delivered == []


def test_chain_root_three_hops_away_reaches_the_edge_and_recovers(chain: Mesh) -> None:
    c = chain.table("c")
    chain.flood(c.breaker_opened(ep("d GET /d"), 20.0, "circuit open: 5 failures"))
    a = chain.table("a")
    assert chain_of(a, "a GET /a") == ["d GET /d", "c GET /c", "b GET /b", "a GET /a"]
    u = a.check(ep("a GET /a"))
    assert u is not None
    assert u.cause_chain[0].reason == "circuit open: 5 failures"
    assert u.cause_chain[-1].reason == "requires b GET /b"
    # The caller's sidecar refuses outbound calls to the unavailable target, too.
    assert chain_of(a, "b GET /b") == ["d GET /d", "c GET /c", "b GET /b"]
    assert chain.available("d GET /d")

    chain.flood(c.breaker_recovered(ep("d GET /d")))
    for name in "abc":
        assert chain.available(f"{name} GET /{name}")
        assert chain.tables[name].unavailable() == {}


def test_half_open_is_available(chain: Mesh) -> None:
    b = chain.table("b")
    chain.flood(b.breaker_transition(ep("c GET /c"), "OPEN", 20.0))
    assert not chain.available("a GET /a")
    chain.flood(b.breaker_transition(ep("c GET /c"), "HALF_OPEN"))
    assert chain.available("a GET /a")
    chain.flood(b.breaker_transition(ep("c GET /c"), "OPEN", 20.0))
    assert chain_of(chain.table("a"), "a GET /a") == ["c GET /c", "b GET /b", "a GET /a"]
    chain.flood(b.breaker_transition(ep("c GET /c"), "CLOSED"))
    assert chain.available("a GET /a")


def test_expiry_is_the_root_open_until_and_covers_a_lost_recovery(chain: Mesh) -> None:
    b, a = chain.table("b"), chain.table("a")
    chain.flood(b.breaker_opened(ep("c GET /c"), 10.0))
    assert a.next_deadline() == pytest.approx(chain.clock() + 10.0)
    down = next(u for u in chain.delivered if u.endpoint == ep("b GET /b"))
    assert down.expires_at == pytest.approx(chain.clock.wall() + 10.0, abs=0.001)
    b.breaker_recovered(ep("c GET /c"))  # the recovery update is lost on the way
    chain.clock.advance(9.9)
    assert not chain.available("a GET /a")
    chain.clock.advance(0.2)
    assert chain.available("a GET /a")  # no update needed
    assert a.expire() == [ep("a GET /a")]
    assert a.next_deadline() is None


def test_refresh_extends_expiry_with_a_newer_version(chain: Mesh) -> None:
    b = chain.table("b")
    first = b.breaker_opened(ep("c GET /c"), 10.0)
    chain.flood(first)
    chain.clock.advance(8.0)
    second = b.breaker_opened(ep("c GET /c"), 10.0)
    assert len(second) == 1
    assert second[0].version > first[0].version
    chain.flood(second)
    chain.clock.advance(5.0)
    assert not chain.available("a GET /a")


def test_fan_out_one_root_takes_down_every_dependent(mesh: Mesh) -> None:
    for caller in ("x GET /1", "x GET /2", "y GET /1"):
        mesh.edge(caller, "db GET /q")
    mesh.edge("edge GET /home", "x GET /1")
    mesh.edge("edge GET /home", "y GET /1")
    mesh.flood(mesh.table("x").breaker_opened("db", 30.0, "db down"))
    assert not mesh.available("x GET /1")
    assert not mesh.available("x GET /2")
    assert mesh.available("y GET /1")  # y's own breaker for db is still closed
    assert chain_of(mesh.table("edge"), "edge GET /home") == [
        "db * *",
        "x GET /1",
        "edge GET /home",
    ]


def test_fan_in_stays_down_until_every_required_dependency_recovers(mesh: Mesh) -> None:
    mesh.edge("front GET /f", "s1 GET /s")
    mesh.edge("front GET /f", "s2 GET /s")
    mesh.edge("top GET /t", "front GET /f")
    front = mesh.table("front")
    mesh.flood(front.breaker_opened(ep("s1 GET /s"), 10.0))
    mesh.flood(front.breaker_opened(ep("s2 GET /s"), 30.0))
    # The cause with the later expiry is reported: it holds dependents the longest.
    assert chain_of(front, "front GET /f") == ["s2 GET /s", "front GET /f"]
    mesh.flood(front.breaker_recovered(ep("s2 GET /s")))
    assert chain_of(mesh.table("top"), "top GET /t") == ["s1 GET /s", "front GET /f", "top GET /t"]
    mesh.flood(front.breaker_recovered(ep("s1 GET /s")))
    assert mesh.available("front GET /f")
    assert mesh.available("top GET /t")


def test_a_cycle_terminates_and_recovers(mesh: Mesh) -> None:
    # a -> b -> a is a cycle across two services; b also needs c.
    mesh.edge("a GET /a", "b GET /b")
    mesh.edge("b GET /b", "a GET /a")
    mesh.edge("b GET /b", "c GET /c")
    mesh.edge("b GET /other", "a GET /a")
    sent = mesh.flood(mesh.table("b").breaker_opened(ep("c GET /c"), 20.0))
    assert sent < 20
    assert chain_of(mesh.table("a"), "a GET /a") == ["c GET /c", "b GET /b", "a GET /a"]
    # The chain already containing b:/b stops at b; b:/other is extended once.
    assert chain_of(mesh.table("b"), "b GET /b") == ["c GET /c", "b GET /b"]
    assert chain_of(mesh.table("b"), "b GET /other") == [
        "c GET /c",
        "b GET /b",
        "a GET /a",
        "b GET /other",
    ]
    mesh.flood(mesh.table("b").breaker_recovered(ep("c GET /c")))
    for e in ("a GET /a", "b GET /b", "b GET /other"):
        assert mesh.available(e)


def test_an_optional_edge_does_not_propagate(mesh: Mesh) -> None:
    mesh.edge("shop GET /page", "reco GET /suggest", optional=True)
    mesh.edge("shop GET /page", "cart GET /items")
    shop = mesh.table("shop")
    mesh.flood(shop.breaker_opened(ep("reco GET /suggest"), 30.0))
    assert mesh.available("shop GET /page")
    assert not shop.is_available(ep("reco GET /suggest"))  # calls to it are still refused
    # Marked optional after the fact (config): a required edge stops propagating.
    mesh.flood(shop.breaker_opened(ep("cart GET /items"), 30.0))
    assert not mesh.available("shop GET /page")
    shop.graph.mark_optional(ep("shop GET /page"), ep("cart GET /items"))
    mesh.flood(shop.graph_changed([ep("shop GET /page")]))
    assert mesh.available("shop GET /page")


def test_learning_a_required_edge_to_a_down_dependency_takes_effect_at_once(mesh: Mesh) -> None:
    shop = mesh.table("shop")
    mesh.flood(shop.breaker_opened(ep("pay POST /charge"), 30.0))
    assert mesh.available("shop POST /buy")
    updates = shop.learn(ep("shop POST /buy"), ep("pay POST /charge"))
    assert [u.available for u in updates] == [False]
    assert not mesh.available("shop POST /buy")
    assert shop.learn(ep("shop POST /buy"), ep("pay POST /charge")) == ()


def test_aged_out_edge_releases_its_caller(mesh: Mesh, clock: FakeClock) -> None:
    shop = mesh.table("shop")
    shop.learn(ep("shop POST /buy"), ep("pay POST /charge"))
    mesh.flood(shop.breaker_opened(ep("pay POST /charge"), 300.0))
    clock.advance(601.0)  # the default edge TTL is 600 s; the breaker is held open (max TTL 300)
    mesh.flood(shop.breaker_opened(ep("pay POST /charge"), 300.0))
    assert not mesh.available("shop POST /buy")
    updates = shop.expire_edges()
    assert [(u.endpoint, u.available) for u in updates] == [(ep("shop POST /buy"), True)]


def test_service_wide_breaker_covers_every_endpoint_of_the_target(mesh: Mesh) -> None:
    mesh.edge("shop GET /a", "pay GET /x")
    mesh.edge("shop GET /b", "pay POST /y")
    shop = mesh.table("shop")
    mesh.flood(shop.breaker_opened("pay", 10.0))
    assert not shop.is_available(ep("pay GET /never-seen"))
    assert not mesh.available("shop GET /a")
    assert not mesh.available("shop GET /b")
    assert Endpoint.service_wide("pay") in shop.unavailable()
    mesh.flood(shop.breaker_recovered("pay"))
    assert mesh.available("shop GET /a")
    assert shop.breaker_recovered("pay") == ()


def test_forged_updates_are_rejected_and_counted(chain: Mesh, clock: FakeClock) -> None:
    a = chain.table("a")
    chain_ = (Cause(ep("c GET /c"), "circuit open"), Cause(ep("b GET /b"), "requires c GET /c"))
    forged = AvailabilityUpdate("b", ep("b GET /b"), False, chain_, clock.wall() + 30, 1)
    assert a.receive(forged).verdict is Verdict.UNSIGNED
    assert a.receive(sign(forged, b"wrong secret")).verdict is Verdict.BAD_SIGNATURE
    assert chain.available("a GET /a")
    assert a.counters["rejected_unsigned"] == 1
    assert a.counters["rejected_bad_signature"] == 1
    assert a.snapshot()["counters"]["received"] == 2


def test_stale_duplicate_and_expired_updates_are_rejected(chain: Mesh, clock: FakeClock) -> None:
    b, a = chain.table("b"), chain.table("a")
    (down,) = b.breaker_opened(ep("c GET /c"), 10.0)
    (up,) = b.breaker_recovered(ep("c GET /c"))
    assert a.receive(up).verdict is Verdict.ACCEPTED
    assert a.receive(down).verdict is Verdict.STALE  # arrived late: must not take a down
    assert a.receive(up).verdict is Verdict.DUPLICATE  # e.g. via both Watch and Redis
    assert chain.available("a GET /a")
    (late,) = b.breaker_opened(ep("c GET /c"), 1.0)
    clock.advance(2.0)
    assert a.receive(late).verdict is Verdict.EXPIRED
    assert a.counters["rejected_stale"] == 1
    assert a.counters["rejected_expired"] == 1


def test_expiry_from_a_skewed_sender_is_clamped(clock: FakeClock) -> None:
    table = AvailabilityTable(
        "a", DependencyGraph(clock), clock=clock, wall_clock=clock.wall, max_ttl=30.0
    )
    root = ep("b GET /b")
    update = AvailabilityUpdate(
        "b", root, False, (Cause(root, "circuit open"),), clock.wall() + 86_400, 1
    )
    assert table.receive(update).verdict is Verdict.ACCEPTED
    clock.advance(30.0)
    assert table.is_available(root)


def test_own_echo_from_the_bus_is_refused(chain: Mesh) -> None:
    b = chain.table("b")
    (down,) = b.breaker_opened(ep("c GET /c"), 10.0)
    assert b.receive(down).verdict is Verdict.OWN_SERVICE


def test_no_update_speaks_for_the_receivers_own_endpoints(clock: FakeClock) -> None:
    """Not even a replica's: each derives its own endpoints from its own breakers, so nobody
    holding the secret can make a sidecar refuse its own inbound traffic."""
    replicas = [
        AvailabilityTable("b", DependencyGraph(clock), clock=clock, wall_clock=clock.wall)
        for _ in range(2)
    ]
    replicas[0].learn(ep("b GET /b"), ep("c GET /c"))
    (down,) = replicas[0].breaker_opened(ep("c GET /c"), 10.0)
    assert replicas[1].receive(down).verdict is Verdict.OWN_SERVICE
    assert replicas[1].is_available(ep("b GET /b"))
    assert replicas[1].counters["rejected_own_service"] == 1


def test_a_version_far_past_the_receivers_clock_is_refused(chain: Mesh, clock: FakeClock) -> None:
    """One forged huge version would make every real update for that endpoint stale."""
    a = chain.table("a")
    endpoint = ep("b GET /b")
    chain_ = (Cause(ep("c GET /c"), "circuit open"), Cause(endpoint, "requires c GET /c"))

    def update(version: int, available: bool = False) -> AvailabilityUpdate:
        cause = () if available else chain_
        raw = AvailabilityUpdate("b", endpoint, available, cause, clock.wall() + 30, version)
        return sign(raw, chain.secret)

    now_us = int(clock.wall() * 1_000_000)
    assert a.receive(update(2**64 - 1)).verdict is Verdict.FUTURE_VERSION
    assert a.receive(update(now_us + 61_000_000)).verdict is Verdict.FUTURE_VERSION
    assert a.is_available(endpoint)
    ahead = now_us + 59_000_000  # a clock 59 s ahead is within the skew
    assert a.receive(update(ahead)).verdict is Verdict.ACCEPTED
    assert not a.is_available(endpoint)
    assert a.receive(update(now_us, available=True)).verdict is Verdict.STALE
    clock.advance(60.0)  # a forged version within the skew blocks real ones for 60 s at most
    later = int(clock.wall() * 1_000_000)
    assert a.receive(update(later, available=True)).verdict is Verdict.ACCEPTED
    assert a.is_available(endpoint)


def test_snapshot_lists_unavailable_endpoints_and_edges(chain: Mesh) -> None:
    chain.flood(chain.table("b").breaker_opened(ep("c GET /c"), 10.0))
    snap = chain.table("a").snapshot()
    assert snap["service"] == "a"
    listed = {item["endpoint"]: item for item in snap["unavailable"]}
    assert set(listed) == {"a GET /a", "b GET /b"}
    assert listed["a GET /a"]["expiresIn"] == 10.0
    assert listed["a GET /a"]["causeChain"][0] == {
        "endpoint": "c GET /c",
        "reason": "circuit_open",
    }
    assert snap["edges"] == [{"caller": "a GET /a", "callee": "b GET /b", "required": True}]


def test_unsigned_mesh_without_secret_still_propagates(clock: FakeClock) -> None:
    mesh = Mesh(clock, secret=None)
    mesh.edge("a GET /a", "b GET /b")
    mesh.edge("b GET /b", "c GET /c")
    mesh.flood(mesh.table("b").breaker_opened(ep("c GET /c"), 10.0))
    assert not mesh.available("a GET /a")
    assert all(u.signature == "" for u in mesh.delivered)


@pytest.mark.parametrize("retry_after", [0.0, -1.0, float("nan")])
def test_an_open_breaker_already_due_for_a_probe_propagates_nothing(
    chain: Mesh, retry_after: float
) -> None:
    b = chain.table("b")
    chain.flood(b.breaker_opened(ep("c GET /c"), 10.0))
    chain.flood(b.breaker_opened(ep("c GET /c"), retry_after))
    assert chain.available("a GET /a")
    assert b.is_available(ep("c GET /c"))


def test_a_forced_open_breaker_is_capped_at_max_ttl(chain: Mesh, clock: FakeClock) -> None:
    chain.flood(chain.table("b").breaker_opened(ep("c GET /c"), float("inf")))
    clock.advance(299.0)
    assert not chain.available("a GET /a")
    clock.advance(1.0)
    assert chain.available("a GET /a")


def test_a_new_subscriber_hears_the_current_unavailabilities(chain: Mesh, clock: FakeClock) -> None:
    b = chain.table("b")
    assert b.current() == []
    (down,) = b.breaker_opened(ep("c GET /c"), 10.0)
    assert b.current() == [down]
    # A late subscriber (a new replica of a) applies it and is up to date.
    late = AvailabilityTable(
        "a", DependencyGraph(clock), clock=clock, wall_clock=clock.wall, secret=chain.secret
    )
    late.learn(ep("a GET /a"), ep("b GET /b"))
    assert late.receive(b.current()[0]).verdict is Verdict.ACCEPTED
    assert not late.is_available(ep("a GET /a"))
    # A reconnecting subscriber that saw `down` also hears the recovery it missed.
    (up,) = b.breaker_recovered(ep("c GET /c"))
    assert b.current() == []
    assert b.current(since_version=down.version) == [up]
    assert b.current(since_version=up.version) == []
    # An old recovery is re-issued fresh, so it is not refused as expired.
    clock.advance(120.0)
    (again,) = b.current(since_version=down.version)
    assert again.available
    assert again.version > up.version
    assert late.receive(again).verdict is Verdict.ACCEPTED
    assert late.is_available(ep("a GET /a"))


def test_expired_unavailabilities_are_not_replayed(chain: Mesh, clock: FakeClock) -> None:
    b = chain.table("b")
    b.breaker_opened(ep("c GET /c"), 10.0)
    clock.advance(10.0)
    assert b.current() == []
