"""Fleet quorum: one replica with a local fault cannot open a shared breaker for everyone.

Each RedisStore here stands for one instance of the fleet (its own instance id), as one process
each would; tests/stores_redis/test_fleet.py runs the same story with real processes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from cascadebreaker import (
    CircuitBreaker,
    CircuitOpenError,
    FleetQuorum,
    Reason,
    RedisStore,
    Scope,
    State,
)
from cascadebreaker.stores.redis_scripts import RemoteState

from .conftest import eventually
from .test_contract_rounds import settle

pytestmark = pytest.mark.redis
MakeStore = Callable[..., RedisStore]
LONG = 30.0


class Broken(ConnectionError):
    """This replica's route to the upstream is broken."""


def fail(breaker: CircuitBreaker, times: int) -> None:
    for _ in range(times):
        with pytest.raises(Broken):
            breaker.call(_broken)


def _broken() -> None:
    raise Broken("no route to host")


def shared_state(store: RedisStore, name: str = "upstream") -> str:
    raw: Any = store.client.hget(store.key(name), "state")
    return raw.decode()


def fleet(
    make: MakeStore, quorum: FleetQuorum, members: int = 3, **settings: Any
) -> list[CircuitBreaker]:
    settings.setdefault("failure_threshold", 3)
    settings.setdefault("recovery_timeout", LONG)
    return [
        CircuitBreaker("upstream", store=make(quorum=quorum, instance=f"replica-{i}"), **settings)
        for i in range(members)
    ]


def test_one_replica_trips_for_itself_alone(redis_stores: MakeStore) -> None:
    sick, healthy, other = fleet(redis_stores, FleetQuorum(reporters=2))
    fail(sick, 3)
    assert sick.state is State.OPEN
    snapshot = sick.snapshot()
    assert snapshot.scope is Scope.LOCAL and snapshot.reason == Reason.CONSECUTIVE_FAILURES
    with pytest.raises(CircuitOpenError) as info:
        sick.call(lambda: "not run")
    assert info.value.scope is Scope.LOCAL and "local" in str(info.value)
    settle((sick.store, healthy.store))  # type: ignore[arg-type]
    assert shared_state(healthy.store) == "CLOSED"  # type: ignore[arg-type]
    for breaker in (healthy, other):
        assert breaker.state is State.CLOSED and breaker.snapshot().scope is Scope.SHARED
        assert breaker.call(lambda: "ok") == "ok"


def test_a_second_replica_makes_the_quorum_and_opens_it_for_everyone(
    redis_stores: MakeStore,
) -> None:
    first, second, bystander = fleet(redis_stores, FleetQuorum(reporters=2))
    fail(first, 3)
    fail(second, 3)
    everyone = (first, second, bystander)
    eventually(
        lambda: all(b.state is State.OPEN and b.snapshot().scope is Scope.SHARED for b in everyone),
        what="the quorum opens the shared circuit, and the local trips adopt it",
    )
    with pytest.raises(CircuitOpenError) as info:
        bystander.call(lambda: "not run")
    assert info.value.scope is Scope.SHARED and info.value.reason == Reason.CONSECUTIVE_FAILURES
    assert info.value.last_failure is not None and info.value.last_failure.type == "Broken"
    assert "2 instances" in bystander.snapshot().detail


def test_a_local_trip_probes_and_recovers_on_its_own(redis_stores: MakeStore) -> None:
    sick, healthy, _ = fleet(redis_stores, FleetQuorum(reporters=2), recovery_timeout=0.2)
    fail(sick, 3)
    eventually(lambda: sick.retry_after == 0.0, what="the local open wait ends")
    probe = sick.acquire()
    assert probe.probe and sick.state is State.HALF_OPEN
    assert healthy.state is State.CLOSED  # the fleet never left CLOSED
    probe.failure(Broken("still no route"))  # reopens locally, and votes again
    assert sick.state is State.OPEN and sick.snapshot().scope is Scope.LOCAL
    eventually(lambda: sick.retry_after == 0.0, what="the second local open wait ends")
    assert sick.call(lambda: "route fixed") == "route fixed"
    assert sick.state is State.CLOSED and sick.snapshot().scope is Scope.SHARED
    settle((sick.store, healthy.store))  # type: ignore[arg-type]
    assert shared_state(sick.store) == "CLOSED"  # type: ignore[arg-type]


def test_votes_of_an_earlier_closed_round_do_not_count(redis_stores: MakeStore) -> None:
    a, b, c = fleet(redis_stores, FleetQuorum(reporters=2), recovery_timeout=0.2)
    fail(a, 3)  # a's vote in closed round 1
    fail(b, 3)  # b's vote: quorum, the shared circuit opens
    eventually(lambda: c.state is State.OPEN, what="shared open")
    eventually(lambda: c.retry_after == 0.0, what="open wait over")
    assert c.call(lambda: "probe ok") == "probe ok"
    eventually(lambda: all(x.state is State.CLOSED for x in (a, b, c)), what="closed again")
    fail(c, 3)  # a's and b's old votes belong to the round before: c is alone
    settle((c.store, a.store))  # type: ignore[arg-type]
    assert c.snapshot().scope is Scope.LOCAL
    assert a.state is State.CLOSED and b.state is State.CLOSED


@pytest.mark.parametrize("driver", ["breaker", "view"])
def test_a_fraction_of_the_active_instances(redis_stores: MakeStore, driver: str) -> None:
    quorum = FleetQuorum(reporters=1, fraction=0.5, window=10.0)
    members = fleet(redis_stores, quorum, members=4)
    for breaker in members:  # every instance calls: the heartbeat counts it as active
        if driver == "breaker":
            assert breaker.call(lambda: "ok") == "ok"
        else:  # a compiled driver's lock-free success (the sidecar's pipeline), counted apart
            breaker._slot.view.successes += 1

    def heard_from_all() -> bool:
        settle(tuple(b.store for b in members))  # type: ignore[arg-type]
        return len(_seen(members[0].store)) == 4  # type: ignore[arg-type]

    eventually(heard_from_all, what="four instances heard from")
    fail(members[0], 3)
    settle(tuple(b.store for b in members[:2]))  # type: ignore[arg-type]
    assert members[1].state is State.CLOSED  # 1 of 4 is not half
    fail(members[1], 3)
    eventually(lambda: all(b.state is State.OPEN for b in members), what="2 of 4 is half")


def test_the_fleet_count_needs_failures_from_enough_instances(redis_stores: MakeStore) -> None:
    # A batch that alone brings the fleet-wide consecutive count to the threshold (as after a
    # burst from one replica while the others were idle) opens only with enough instances.
    store = redis_stores(quorum=FleetQuorum(reporters=2), instance="replica-0")
    breaker = CircuitBreaker("upstream", failure_threshold=4, recovery_timeout=LONG, store=store)
    slot = store.find_slot("upstream")
    assert slot is not None

    def report(instance: str, failures: int) -> State:
        quorum = (instance, 2, 0.0, 30_000)
        args = (failures, 0, 0, 4, 30_000, slot.remote_version, "Broken: no route", *quorum)
        reply = RemoteState.from_reply(store.run("report", slot, args))
        slot.apply(reply)
        return reply.state

    assert report("replica-0", 4) is State.CLOSED  # 4 failures, one instance
    assert report("replica-0", 2) is State.CLOSED  # still one instance
    assert report("replica-1", 1) is State.OPEN  # a second instance in the same run
    assert breaker.state is State.OPEN and "2 instances" in breaker.snapshot().detail


def test_a_success_anywhere_resets_the_instances_of_the_run(redis_stores: MakeStore) -> None:
    store = redis_stores(quorum=FleetQuorum(reporters=2), instance="replica-0")
    CircuitBreaker("upstream", failure_threshold=4, recovery_timeout=LONG, store=store)
    slot = store.find_slot("upstream")
    assert slot is not None

    def report(instance: str, lead: int, had: int, tail: int) -> State:
        quorum = (instance, 2, 0.0, 30_000)
        args = (lead, had, tail, 4, 30_000, slot.remote_version, "", *quorum)
        return RemoteState.from_reply(store.run("report", slot, args)).state

    assert report("replica-1", 3, 0, 0) is State.CLOSED
    assert report("replica-0", 0, 1, 2) is State.CLOSED  # a success, then 2 failures of its own
    assert report("replica-0", 2, 0, 0) is State.CLOSED  # 4 in a row, but from replica-0 only


def test_a_real_outage_trips_the_fleet_as_fast_as_without_a_quorum(
    redis_stores: MakeStore,
) -> None:
    # Failures spread over the fleet: each instance sees fewer than its own threshold, and the
    # fleet-wide count (from two instances) opens the shared circuit after `threshold` in all.
    a, b = fleet(redis_stores, FleetQuorum(reporters=2), members=2, failure_threshold=4)
    for breaker in (a, b, a, b):
        fail(breaker, 1)
    eventually(lambda: a.state is State.OPEN and b.state is State.OPEN, what="fleet count trips")
    assert a.snapshot().scope is Scope.SHARED
    assert "2 instances" in a.snapshot().detail


def test_the_heartbeat_is_not_sent_without_calls(redis_stores: MakeStore) -> None:
    quorum = FleetQuorum(reporters=1, fraction=0.5, window=0.4)
    store = redis_stores(quorum=quorum, instance="quiet")
    CircuitBreaker("upstream", store=store)
    time.sleep(0.3)
    settle((store,))
    assert _seen(store) == []


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"reporters": 0}, "quorum.reporters"),
        ({"reporters": 1.5}, "quorum.reporters"),
        ({"fraction": 1.5}, "quorum.fraction"),
        ({"window": 0}, "quorum.window"),
    ],
)
def test_bad_quorum_settings_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        FleetQuorum(**kwargs)


@pytest.mark.parametrize(
    ("option", "value"), [("quorum", 2), ("instance", ""), ("instance", "a,b")]
)
def test_bad_store_quorum_options(redis_server: Any, option: str, value: object) -> None:
    with pytest.raises(ValueError, match=option):
        RedisStore.from_url(redis_server.url, **{option: value})


def _seen(store: RedisStore) -> list[str]:
    raw: Any = store.client.hkeys(store.key("upstream"))
    return [k.decode() for k in raw if k.startswith(b"seen:")]


def test_metrics_show_a_local_trip(redis_stores: MakeStore) -> None:
    from prometheus_client import CollectorRegistry

    from cascadebreaker.integrations.prometheus import BreakerCollector

    sick, healthy = fleet(redis_stores, FleetQuorum(reporters=2), members=2)
    sick_metrics, healthy_metrics = CollectorRegistry(), CollectorRegistry()
    BreakerCollector(sick_metrics).track(sick)
    BreakerCollector(healthy_metrics).track(healthy)
    fail(sick, 3)

    def scope(registry: CollectorRegistry, value: str) -> float | None:
        return registry.get_sample_value(
            "ccb_breaker_scope", {"breaker": "upstream", "scope": value}
        )

    assert scope(sick_metrics, "local") == 1.0 and scope(sick_metrics, "shared") == 0.0
    assert scope(healthy_metrics, "shared") == 1.0 and scope(healthy_metrics, "local") == 0.0
    state = {"breaker": "upstream", "state": "OPEN"}
    assert sick_metrics.get_sample_value("ccb_breaker_state", state) == 1.0
    assert healthy_metrics.get_sample_value("ccb_breaker_state", state) == 0.0
