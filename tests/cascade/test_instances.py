"""Instance-aware availability: replicas of one service, each naming itself in its updates."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cascadebreaker.cascade import (
    AvailabilityTable,
    AvailabilityUpdate,
    Cause,
    DependencyGraph,
    Endpoint,
    MalformedUpdate,
    Verdict,
    canonical_bytes,
    sign,
)
from cascadebreaker.cascade.availability import Unavailability
from cascadebreaker.cascade.instances import InstanceReports, is_presence, resolve_instance
from cascadebreaker.sidecar.grpc.messages import update_from_proto, update_to_proto

from .helpers import FakeClock, ep

SECRET = b"instances-secret"
SHIP = ep("shipping POST /v1/shipments")
COURIER = ep("courier POST /v1/pickups")


def down(instance: str, clock: FakeClock, version: int, ttl: float = 20.0) -> AvailabilityUpdate:
    """`instance` of shipping reports SHIP unavailable (its courier breaker opened)."""
    chain = (Cause(COURIER, "circuit open"), Cause(SHIP, f"requires {COURIER}"))
    update = AvailabilityUpdate(
        "shipping", SHIP, False, chain, clock.wall() + ttl, version, instance=instance
    )
    return sign(update, SECRET)


def up(instance: str, clock: FakeClock, version: int, ttl: float = 60.0) -> AvailabilityUpdate:
    """`instance` of shipping reports SHIP available."""
    update = AvailabilityUpdate(
        "shipping", SHIP, True, (), clock.wall() + ttl, version, instance=instance
    )
    return sign(update, SECRET)


def table(clock: FakeClock, service: str = "checkout", **kwargs: object) -> AvailabilityTable:
    """A table of `service` whose endpoint POST /v1/orders requires SHIP."""
    t = AvailabilityTable(
        service,
        DependencyGraph(clock),
        clock=clock,
        wall_clock=clock.wall,
        secret=SECRET,
        **kwargs,  # type: ignore[arg-type]
    )
    if service == "checkout":
        t.learn(ep("checkout POST /v1/orders"), SHIP)
    return t


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


# -- the wire ------------------------------------------------------------------------------


def test_an_update_without_instance_is_the_anonymous_instance_and_signs_as_before(
    clock: FakeClock,
) -> None:
    old = down("", clock, 1)
    wire = old.to_dict()
    assert "instance" not in wire
    assert b"instance" not in canonical_bytes(old)
    back = AvailabilityUpdate.from_json(old.to_json())
    assert back.instance == ""
    assert back.signature == old.signature


def test_the_instance_travels_on_both_wires_and_is_signed(clock: FakeClock) -> None:
    update = down("shipping-7d9f-x2", clock, 5)
    assert b'"instance":"shipping-7d9f-x2"' in canonical_bytes(update)
    assert AvailabilityUpdate.from_json(update.to_json()) == update
    assert update_from_proto(update_to_proto(update)) == update
    moved = AvailabilityUpdate.from_dict({**update.to_dict(), "instance": "shipping-other"})
    t = table(clock)
    assert t.receive(moved).verdict is Verdict.BAD_SIGNATURE  # a report cannot change owner
    assert t.receive(update).verdict is Verdict.ACCEPTED


@pytest.mark.parametrize("bad", [7, None, "has space", "x" * 254, "a/b", "é"])
def test_a_bad_instance_is_malformed_naming_the_field(clock: FakeClock, bad: object) -> None:
    wire = {**down("ok", clock, 1).to_dict(), "instance": bad}
    with pytest.raises(MalformedUpdate, match="instance"):
        AvailabilityUpdate.from_dict(wire)


def test_the_instance_name_comes_from_config_then_kubernetes_then_the_address() -> None:
    env = {"POD_NAME": "pod-1", "HOSTNAME": "host-1"}
    assert resolve_instance("conf", env, "127.0.0.1:1") == "conf"
    assert resolve_instance(None, env, "127.0.0.1:1") == "pod-1"
    assert resolve_instance(None, {"HOSTNAME": "host-1"}, "127.0.0.1:1") == "host-1"
    assert resolve_instance(None, {}, "127.0.0.1:1") == "127.0.0.1:1"


# -- the rule ------------------------------------------------------------------------------


def test_one_sick_replica_of_two_leaves_the_endpoint_partially_available(
    clock: FakeClock,
) -> None:
    t = table(clock)
    assert t.receive(up("s2", clock, 1)).updates == ()
    assert t.receive(down("s1", clock, 2)).updates == ()  # nothing to tell our callers
    assert t.check(SHIP) is None
    share = t.instances(SHIP)
    assert (share.live, share.unavailable, share.fraction, share.partial) == (2, 1, 0.5, True)
    assert t.check(ep("checkout POST /v1/orders")) is None
    assert t.snapshot()["instances"] == [
        {"endpoint": str(SHIP), "live": 2, "unavailable": 1, "available_fraction": 0.5}
    ]


def test_every_live_replica_sick_refuses_and_tells_callers(clock: FakeClock) -> None:
    t = table(clock)
    t.receive(up("s2", clock, 1))
    t.receive(down("s1", clock, 2))
    sent = t.receive(down("s2", clock, 3)).updates  # s2's newer report replaces its own
    assert [u.endpoint for u in sent] == [ep("checkout POST /v1/orders")]
    assert not sent[0].available
    assert sent[0].instance == ""  # ours: this table has no instance name
    u = t.check(SHIP)
    assert u is not None
    assert [str(c.endpoint) for c in u.cause_chain] == [str(COURIER), str(SHIP)]
    assert t.instances(SHIP).fraction == 0.0
    recovered = t.receive(up("s1", clock, 4)).updates
    assert [u.available for u in recovered] == [True]
    assert t.check(SHIP) is None


def test_a_replica_that_stops_reporting_expires_and_its_sibling_alone_decides(
    clock: FakeClock,
) -> None:
    t = table(clock)
    t.receive(up("s2", clock, 1, ttl=5))
    t.receive(down("s1", clock, 2, ttl=30))
    assert t.check(SHIP) is None
    clock.advance(6)  # s2's report ran out: s1 is the only live instance
    t.expire()
    sent = t.expire_instances()
    assert t.check(SHIP) is not None
    assert [u.endpoint for u in sent] == [ep("checkout POST /v1/orders")]


def test_presence_counts_an_instance_live_for_every_endpoint_of_its_service(
    clock: FakeClock,
) -> None:
    t = table(clock)
    shipping = table(clock, "shipping", instance="s2")
    presence = shipping.presence(30)
    assert is_presence(presence) and presence.instance == "s2"
    assert t.receive(presence).verdict is Verdict.ACCEPTED
    t.receive(down("s1", clock, 2))
    assert t.check(SHIP) is None
    assert t.instances(SHIP).live == 2
    clock.advance(31)  # presence not refreshed: s2 is gone
    t.expire()
    t.expire_instances()
    assert t.check(SHIP) is None  # s1's report ran out as well (20 s)
    t.receive(down("s1", clock, 3))
    assert t.check(SHIP) is not None


def test_a_quorum_refuses_before_every_replica_agrees(clock: FakeClock) -> None:
    t = table(clock, quorum=0.5)
    for i, name in enumerate(("s1", "s2", "s3", "s4")):
        t.receive(up(name, clock, i + 1))
    t.receive(down("s1", clock, 10))
    assert t.check(SHIP) is None
    t.receive(down("s2", clock, 11))
    assert t.check(SHIP) is not None  # 2 of 4 >= 0.5
    assert t.instances(SHIP).fraction == 0.5


def test_old_senders_without_instances_behave_as_one_instance(clock: FakeClock) -> None:
    t = table(clock)
    assert t.receive(down("", clock, 1)).updates != ()
    assert t.check(SHIP) is not None
    assert t.receive(down("", clock, 1)).verdict is Verdict.DUPLICATE
    t.receive(up("", clock, 2))
    assert t.check(SHIP) is None


def test_versions_are_per_instance(clock: FakeClock) -> None:
    t = table(clock)
    assert t.receive(down("s1", clock, 100)).verdict is Verdict.ACCEPTED
    assert t.receive(up("s2", clock, 50)).verdict is Verdict.ACCEPTED  # its own sequence
    assert t.receive(up("s1", clock, 99)).verdict is Verdict.STALE


# -- the sibling's answer -------------------------------------------------------------------


def test_a_healthy_sibling_answers_a_sick_one_for_as_long_as_its_report_lives(
    clock: FakeClock,
) -> None:
    s2 = table(clock, "shipping", instance="s2")
    sick = down("s1", clock, 1, ttl=200)
    answer = s2.sibling_reported(sick)
    assert len(answer) == 1
    assert answer[0].available and answer[0].instance == "s2"
    assert answer[0].expires_at >= sick.expires_at
    assert s2.sibling_reported(down("s1", clock, 2, ttl=100)) == ()  # the answer still covers it
    assert s2.sibling_reported(down("s1", clock, 3, ttl=300)) != ()
    assert s2.sibling_reported(down("s2", clock, 4)) == ()  # our own report, echoed
    forged = AvailabilityUpdate.from_dict({**down("s1", clock, 5).to_dict(), "signature": ""})
    assert s2.sibling_reported(forged) == ()
    assert s2.counters["rejected_unsigned"] == 1


def test_a_sibling_that_is_sick_too_does_not_answer(clock: FakeClock) -> None:
    s2 = table(clock, "shipping", instance="s2")
    s2.learn(SHIP, COURIER)
    s2.breaker_opened("courier", 20)
    assert s2.check(SHIP) is not None
    assert s2.sibling_reported(down("s1", clock, 1)) == ()


def test_through_a_shared_bus_one_sick_replica_of_three_refuses_nothing(
    clock: FakeClock,
) -> None:
    """Three shipping replicas and checkout on one bus (every update reaches every table)."""
    checkout = table(clock)
    replicas = {n: table(clock, "shipping", instance=n) for n in ("s1", "s2", "s3")}
    for r in replicas.values():
        r.learn(SHIP, COURIER)

    def flood(updates: tuple[AvailabilityUpdate, ...]) -> None:
        queue = list(updates)
        while queue:
            update = queue.pop(0)
            checkout.receive(update)
            for name, r in replicas.items():
                if name != update.instance:
                    queue.extend(r.sibling_reported(update))

    flood(replicas["s1"].breaker_opened("courier", 20))
    assert checkout.check(ep("checkout POST /v1/orders")) is None
    assert checkout.instances(SHIP).live == 3
    assert math.isclose(checkout.instances(SHIP).fraction, 2 / 3)
    flood(replicas["s2"].breaker_opened("courier", 20))
    assert checkout.check(ep("checkout POST /v1/orders")) is None
    flood(replicas["s3"].breaker_opened("courier", 20))
    assert checkout.check(ep("checkout POST /v1/orders")) is not None


# -- properties -----------------------------------------------------------------------------

_report = st.tuples(
    st.sampled_from(["a", "b", "c", "d", ""]),
    st.booleans(),  # unavailable?
    st.floats(min_value=0.1, max_value=50),  # ttl
)


@given(
    st.lists(_report, max_size=12),
    st.lists(st.tuples(st.sampled_from(["a", "b", "e"]), st.floats(0.1, 50)), max_size=4),
    st.sampled_from([0.25, 0.5, 2 / 3, 1.0]),
    st.floats(min_value=0, max_value=60),
)
def test_refused_exactly_when_the_quorum_of_live_instances_says_so(
    reports: list[tuple[str, bool, float]],
    presences: list[tuple[str, float]],
    quorum: float,
    later: float,
) -> None:
    agg = InstanceReports(quorum)
    last: dict[str, tuple[bool, float]] = {}
    alive: dict[str, float] = {}
    wall = 1_764_000_000.0
    for version, (instance, sick, ttl) in enumerate(reports, 1):
        cause = (Cause(SHIP, "x"),) if sick else ()
        update = AvailabilityUpdate(
            "shipping", SHIP, not sick, cause, wall + ttl, version, instance=instance
        )
        u = Unavailability(cause, wall + ttl, ttl) if sick else None
        agg.record(update, u, ttl)
        last[instance] = (sick, ttl)
    for instance, ttl in presences:
        presence = AvailabilityUpdate(
            "shipping",
            Endpoint.service_wide("shipping"),
            True,
            (),
            wall + ttl,
            1,
            instance=instance,
        )
        agg.record(presence, None, ttl)
        alive[instance] = ttl  # the latest presence replaces the one before
    unavailable, count = agg.aggregate(SHIP, later)
    live = {i for i, (_, ttl) in last.items() if ttl > later} | {
        i for i, ttl in alive.items() if ttl > later
    }
    sick_live = {i for i, (sick, ttl) in last.items() if sick and ttl > later}
    assert (count.live, count.unavailable) == (len(live), len(sick_live))
    expected = bool(sick_live) and len(sick_live) >= math.ceil(quorum * len(live) - 1e-9)
    assert (unavailable is not None) == expected
    assert 0.0 <= count.fraction <= 1.0
    if unavailable is not None:
        assert unavailable.deadline > later
    agg.expire(later)
    assert (agg.aggregate(SHIP, later)[1]) == count  # expiry drops only what was dead
