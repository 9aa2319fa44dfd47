"""The fleet's rules, driven with explicit times (no sockets, no sleeps)."""

from __future__ import annotations

from cascadebreaker.dashboard.fleet import Fleet
from cascadebreaker.dashboard.model import (
    BreakerStatus,
    Counts,
    EdgeStatus,
    Link,
    SidecarStatus,
    Unavailability,
    Update,
)
from cascadebreaker.dashboard.picture import picture

SHIP = "http://127.0.0.1:1001"
ORDER = "http://127.0.0.1:1002"
WALL = 1_700_000_000.0
ROOT = Link("courier * *", "circuit open")
SHIPMENTS = "shipping POST /v1/shipments"
ORDERS = "order POST /v1/orders"


def shipping(state: str = "CLOSED", unavailable: bool = False, calls: int = 0) -> SidecarStatus:
    chain = (ROOT, Link(SHIPMENTS, "requires courier POST /v1/shipments"))
    return SidecarStatus(
        "shipping",
        breakers=(BreakerStatus("courier", state, 0.0, Counts(calls, calls // 2, 0)),),
        edges=(EdgeStatus(SHIPMENTS, "courier POST /v1/shipments"),),
        unavailable={SHIPMENTS: Unavailability(chain, WALL + 30)} if unavailable else {},
        watch_address="127.0.0.1:2001",
    )


def down(endpoint: str = SHIPMENTS, version: int = 1, expires: float = WALL + 30) -> Update:
    chain = (ROOT, Link(endpoint, "requires courier POST /v1/shipments"))
    return Update("shipping", endpoint, False, chain, expires, version, "watch")


def up(endpoint: str = SHIPMENTS, version: int = 2) -> Update:
    return Update("shipping", endpoint, True, (), 0.0, version, "watch")


def fleet_with(*urls: str) -> Fleet:
    fleet = Fleet()
    for url in urls:
        fleet.follow(url)
    return fleet


def test_a_stream_update_shows_at_once_and_implies_the_open_breaker() -> None:
    fleet = fleet_with(SHIP)
    fleet.status_received(SHIP, shipping(), asked_at=1.0, wall=WALL)

    fleet.update_received(down(), now=2.0, wall=WALL + 1)

    assert fleet.availability(WALL + 1) == {"courier": "unavailable", "shipping": "unavailable"}
    view = fleet.breakers()[("shipping", "courier")]
    assert (view.state, view.inferred) == ("OPEN", True)
    texts = [entry["text"] for entry in fleet.timeline]
    assert "shipping → courier: CLOSED → OPEN" in texts
    assert any(t.startswith(f"{SHIPMENTS} unavailable ← courier * *: circuit open") for t in texts)


def test_a_status_asked_before_the_update_does_not_undo_it() -> None:
    fleet = fleet_with(SHIP)
    fleet.status_received(SHIP, shipping(), asked_at=1.0, wall=WALL)
    fleet.update_received(down(), now=3.0, wall=WALL + 1)

    # Asked at 2.5, answered after the update arrived at 3.0: older than the update.
    fleet.status_received(SHIP, shipping(), asked_at=2.5, wall=WALL + 2)

    assert SHIPMENTS in fleet.beliefs(WALL + 2)
    assert fleet.breakers()[("shipping", "courier")].state == "OPEN"


def test_a_status_asked_after_the_update_is_the_truth() -> None:
    fleet = fleet_with(SHIP)
    fleet.update_received(down(), now=3.0, wall=WALL + 1)

    fleet.status_received(SHIP, shipping("HALF_OPEN"), asked_at=4.0, wall=WALL + 2)

    assert fleet.beliefs(WALL + 2) == {}
    view = fleet.breakers()[("shipping", "courier")]
    assert (view.state, view.inferred) == ("HALF_OPEN", False)


def test_a_recovery_update_clears_the_endpoint() -> None:
    fleet = fleet_with(SHIP)
    fleet.status_received(SHIP, shipping("OPEN", unavailable=True), asked_at=1.0, wall=WALL)
    assert fleet.availability(WALL)["shipping"] == "unavailable"

    fleet.update_received(up(), now=2.0, wall=WALL + 1)

    assert SHIPMENTS not in fleet.beliefs(WALL + 1)
    assert fleet.updates_of[SHIPMENTS][0]["available"] is True


def test_unavailability_expires_without_a_recovery_update() -> None:
    changes: list[int] = []
    fleet = Fleet(on_change=lambda: changes.append(1))
    fleet.follow(SHIP)
    fleet.status_received(SHIP, shipping(), asked_at=1.0, wall=WALL)
    fleet.update_received(down(expires=WALL + 5), now=2.0, wall=WALL + 1)
    before = len(changes)

    assert fleet.tick(WALL + 4) is False
    assert fleet.tick(WALL + 5) is True

    assert fleet.availability(WALL + 5)["shipping"] == "available"
    assert len(changes) == before + 1
    assert fleet.timeline[0]["text"].endswith("unavailable → available")


def test_a_sidecar_that_stops_answering_is_unreachable_not_dropped() -> None:
    fleet = fleet_with(SHIP)
    fleet.status_received(SHIP, shipping("OPEN", unavailable=True), asked_at=1.0, wall=WALL)

    fleet.status_failed(SHIP, "connection refused", WALL + 1)

    assert fleet.availability(WALL + 1)["shipping"] == "unreachable"
    view = fleet.breakers()[("shipping", "courier")]
    assert (view.state, view.stale) == ("OPEN", True)  # last known, marked as such
    assert "shipping sidecar unreachable: connection refused" in [e["text"] for e in fleet.timeline]
    # What it said before is not believed any more.
    assert SHIPMENTS not in fleet.beliefs(WALL + 1)


def test_a_sidecar_never_reached_is_unreachable_under_its_url_or_name() -> None:
    fleet = Fleet()
    fleet.follow(SHIP)
    fleet.follow(ORDER, "order")

    fleet.status_failed(SHIP, "no answer (timeout)", WALL)
    fleet.status_failed(ORDER, "connection refused", WALL)

    assert fleet.availability(WALL) == {SHIP: "unreachable", "order": "unreachable"}


def test_first_contact_logs_no_transitions() -> None:
    fleet = fleet_with(SHIP)

    fleet.status_received(SHIP, shipping(), asked_at=1.0, wall=WALL)

    assert [e for e in fleet.timeline if e["kind"] in ("availability", "sidecar")] == []


def test_a_sidecar_back_after_an_outage_is_logged() -> None:
    fleet = fleet_with(SHIP)
    fleet.status_received(SHIP, shipping(), asked_at=1.0, wall=WALL)
    fleet.status_failed(SHIP, "connection refused", WALL + 1)

    fleet.status_received(SHIP, shipping(), asked_at=3.0, wall=WALL + 2)

    texts = [e["text"] for e in fleet.timeline]
    assert texts[:2] == ["shipping: unreachable → available", "shipping sidecar reachable again"]


def test_rates_come_from_successive_statuses_and_reset_with_the_sidecar() -> None:
    fleet = fleet_with(SHIP)
    fleet.status_received(SHIP, shipping(calls=10), asked_at=1.0, wall=WALL)
    assert fleet.breakers()[("shipping", "courier")].rates is None

    fleet.status_received(SHIP, shipping(calls=30), asked_at=6.0, wall=WALL + 5)
    rates = fleet.breakers()[("shipping", "courier")].rates
    assert rates is not None
    assert (rates.calls, rates.failures) == (4.0, 2.0)

    fleet.status_received(SHIP, shipping(calls=2), asked_at=11.0, wall=WALL + 10)  # restarted
    assert fleet.breakers()[("shipping", "courier")].rates is None


def test_replicas_make_an_endpoint_unavailable_only_together() -> None:
    other = "http://127.0.0.1:1003"
    fleet = fleet_with(SHIP, other)
    fleet.status_received(SHIP, shipping("OPEN", unavailable=True), asked_at=1.0, wall=WALL)
    fleet.status_received(other, shipping(), asked_at=1.0, wall=WALL)

    assert SHIPMENTS not in fleet.beliefs(WALL)
    assert fleet.partial(WALL) == {SHIPMENTS: (1, 2)}
    view = fleet.breakers()[("shipping", "courier")]
    assert (view.state, view.instances, view.open_instances) == ("OPEN", 2, 1)

    fleet.status_received(other, shipping("OPEN", unavailable=True), asked_at=2.0, wall=WALL)

    assert fleet.beliefs(WALL)[SHIPMENTS].reporters == 2
    assert fleet.availability(WALL)["shipping"] == "unavailable"


def test_a_callers_open_breaker_makes_the_whole_upstream_unavailable() -> None:
    fleet = fleet_with(ORDER, SHIP)
    fleet.status_received(SHIP, shipping(), asked_at=1.0, wall=WALL)
    whole = Unavailability((Link("shipping * *", "circuit open"),), WALL + 9)
    order = SidecarStatus("order", unavailable={"shipping * *": whole, SHIPMENTS: whole})

    fleet.status_received(ORDER, order, asked_at=1.0, wall=WALL)

    beliefs = fleet.beliefs(WALL)
    assert "shipping * *" in beliefs
    assert SHIPMENTS not in beliefs  # shipping's own sidecar speaks for its endpoints
    assert fleet.availability(WALL)["shipping"] == "unavailable"


def test_updates_about_unfollowed_services_come_from_redis() -> None:
    fleet = Fleet()
    update = Update("payment", "payment POST /v1/charges", False, (ROOT,), WALL + 5, 3, "redis")

    fleet.update_received(update, now=1.0, wall=WALL)

    assert fleet.services() == ["courier", "payment"]
    assert fleet.availability(WALL)["payment"] == "unavailable"


def test_fault_banner_changes_are_logged_once() -> None:
    fleet = Fleet()
    fleet.fault_changed("courier", "down", WALL)
    fleet.fault_changed("courier", "down", WALL + 1)
    fleet.fault_changed("courier", None, WALL + 2)

    assert [e["text"] for e in fleet.timeline] == [
        "fault cleared: courier",
        "fault injected: courier down",
    ]
    assert fleet.faults == {}


def test_the_picture_carries_the_hooks_the_page_needs() -> None:
    fleet = fleet_with(SHIP)
    fleet.declare(["gateway"])
    fleet.status_received(SHIP, shipping(), asked_at=1.0, wall=WALL)
    fleet.update_received(down(), now=2.0, wall=WALL + 1)

    doc = picture(fleet, WALL + 1)

    services = {s["name"]: s for s in doc["services"]}
    assert set(services) == {"courier", "gateway", "shipping"}
    assert services["gateway"]["availability"] == "available"
    assert services["courier"]["causeChain"] == [
        {"endpoint": "courier * *", "service": "courier", "reason": "circuit open"}
    ]
    (endpoint,) = services["shipping"]["endpoints"]
    assert (endpoint["id"], endpoint["name"], endpoint["available"]) == (
        SHIPMENTS,
        "POST /v1/shipments",
        False,
    )
    assert [u["version"] for u in endpoint["updates"]] == [1]
    (edge,) = doc["edges"]
    assert (edge["caller"], edge["available"]) == (SHIPMENTS, False)
    (breaker,) = doc["breakers"]
    assert (breaker["service"], breaker["upstream"], breaker["state"]) == (
        "shipping",
        "courier",
        "OPEN",
    )
    assert doc["timeline"][0]["kind"] in ("availability", "breaker", "update")
