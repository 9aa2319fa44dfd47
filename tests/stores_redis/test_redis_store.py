"""RedisStore specifics: keys, expiry, namespaces, versioning, leases, outages, bad input."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from cascadebreaker import CircuitBreaker, CircuitOpenError, RedisStore, State
from cascadebreaker.stores.base import Store
from cascadebreaker.stores.redis_scripts import RemoteState

from .conftest import eventually

pytestmark = pytest.mark.redis
MakeStore = Callable[..., RedisStore]


def boom() -> None:
    raise RuntimeError("upstream down")


def fail(breaker: CircuitBreaker, times: int = 1) -> None:
    for _ in range(times):
        with pytest.raises(RuntimeError):
            breaker.call(boom)


def shared(store: RedisStore, name: str = "upstream") -> dict[str, str]:
    raw: Any = store.client.hgetall(store.key(name))
    return {k.decode(): v.decode() for k, v in raw.items()}


def test_implements_the_store_protocol(redis_stores: MakeStore) -> None:
    assert isinstance(redis_stores(), Store)


def test_keys_are_namespaced_and_expire(redis_stores: MakeStore, namespace: str) -> None:
    store = redis_stores(key_ttl=2.0)
    breaker = CircuitBreaker("upstream", failure_threshold=1, recovery_timeout=0.2, store=store)
    fail(breaker)
    key = f"ccb:{namespace}:upstream"
    assert store.key("upstream") == key
    eventually(lambda: shared(store).get("state") == "OPEN", what="the trip is written")
    ttl: Any = store.client.pttl(key)
    assert 0 < ttl <= 2000 + 200  # an open circuit's key outlives its open wait
    eventually(lambda: not store.client.exists(key), what="the idle key expires")


def test_namespaces_do_not_share(redis_stores: MakeStore, namespace: str) -> None:
    shop, shop_too, other = redis_stores(), redis_stores(), redis_stores(ns=namespace + "-other")
    a = CircuitBreaker("upstream", failure_threshold=1, store=shop)
    b = CircuitBreaker("upstream", failure_threshold=1, store=shop_too)
    c = CircuitBreaker("upstream", failure_threshold=1, store=other)
    fail(a)
    eventually(lambda: b.state is State.OPEN, what="same namespace shares")
    assert c.state is State.CLOSED
    assert c.call(lambda: "ok") == "ok"


def test_a_new_member_joins_an_open_fleet(redis_stores: MakeStore) -> None:
    a = CircuitBreaker("upstream", failure_threshold=1, store=redis_stores())
    fail(a)
    eventually(lambda: a.snapshot()["version"] == int(shared(redis_stores())["version"]))
    late = CircuitBreaker("upstream", failure_threshold=1, store=redis_stores())
    assert late.state is State.OPEN  # read on creation, before any call
    with pytest.raises(CircuitOpenError):
        late.call(lambda: None)


@pytest.mark.parametrize("driver", ["breaker", "view"])
def test_successes_anywhere_reset_the_fleet_failure_count(
    redis_stores: MakeStore, driver: str
) -> None:
    store_a, store_b = redis_stores(), redis_stores()
    a = CircuitBreaker("upstream", failure_threshold=2, store=store_a)
    b = CircuitBreaker("upstream", failure_threshold=2, store=store_b)
    fail(a)
    eventually(lambda: shared(store_a).get("fails") == "1", what="a's failure is counted")
    slot_b = store_b.slot("upstream", b.config, time.monotonic)
    eventually(lambda: slot_b.shared_dirty, what="b hears a run started")
    if driver == "breaker":
        assert b.call(lambda: "ok") == "ok"  # lock-free path, reported by b's flusher
    else:  # a compiled driver's lock-free success (the sidecar's pipeline), counted apart
        assert slot_b.view.fast is not None
        slot_b.view.successes += 1
        assert b.snapshot().calls.success == 1
    eventually(lambda: shared(store_a).get("fails") == "0", what="b's success resets the count")
    fail(b)
    eventually(lambda: shared(store_a).get("fails") == "1", what="b's failure is counted")
    assert a.state is State.CLOSED and b.state is State.CLOSED


def test_a_late_write_never_overwrites_a_newer_state(redis_stores: MakeStore) -> None:
    store = redis_stores()
    breaker = CircuitBreaker("upstream", failure_threshold=1, store=store)
    slot = store.slot("upstream", breaker.config, time.monotonic)
    stale = slot.remote_version
    fail(breaker)
    eventually(lambda: shared(store).get("state") == "OPEN")
    breaker.reset()
    eventually(lambda: shared(store).get("state") == "CLOSED")
    newer = int(shared(store)["version"])
    # A trip decided under an older version, and a probe result from an older round, are no-ops.
    trip_args = (stale, 1000, "late", 0, "", "", "", 0, 0.0, 0)
    trip = RemoteState.from_reply(store.run("trip", slot, trip_args))
    assert trip.state is State.CLOSED and trip.version == newer
    probe_args = (stale, "S", 0, 1, 1, 1, 0, 0, 1000, "")
    probe = RemoteState.from_reply(store.run("probe", slot, probe_args))
    assert probe.state is State.CLOSED and probe.version == newer


def test_probe_lease_frees_a_lost_probe(redis_stores: MakeStore) -> None:
    store_a = redis_stores(probe_lease=2.0)
    store_b = redis_stores(probe_lease=2.0)
    a = CircuitBreaker("upstream", failure_threshold=1, recovery_timeout=0.1, store=store_a)
    b = CircuitBreaker("upstream", failure_threshold=1, recovery_timeout=0.1, store=store_b)
    fail(a)
    eventually(lambda: b.state is State.OPEN)

    def admitted(breaker: CircuitBreaker) -> bool:
        try:
            breaker.acquire()  # never finished: this probe's process 'dies'
        except CircuitOpenError:
            return False
        return True

    eventually(lambda: admitted(a), what="the first probe")
    with pytest.raises(CircuitOpenError):
        b.acquire()
    eventually(lambda: admitted(b), what="the lease runs out and frees the budget")


def test_unreachable_redis_never_raises_and_logs_once(
    caplog: pytest.LogCaptureFixture, own_redis_server: Any, namespace: str
) -> None:
    own_redis_server.stop()
    store = RedisStore.from_url(own_redis_server.url, namespace=namespace)
    try:
        with caplog.at_level(logging.WARNING, logger="cascadebreaker"):
            breaker = CircuitBreaker(
                "upstream", failure_threshold=2, recovery_timeout=0.1, store=store
            )
            for _ in range(50):
                assert breaker.call(lambda: "ok") == "ok"
            fail(breaker, 2)
            assert breaker.state is State.OPEN  # local state goes on
            time.sleep(0.15)
            assert breaker.call(lambda: "probe") == "probe"  # local probe closes it
            assert breaker.state is State.CLOSED
            breaker.force_open()
            breaker.reset()
        unreachable = [r for r in caplog.records if "unreachable" in r.getMessage()]
        assert len(unreachable) == 1
    finally:
        store.close()


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("key_ttl", 0),
        ("flush_interval", -1.0),
        ("probe_lease", 0),
        ("half_open_poll", 0),
        ("socket_timeout", 0),
        ("heartbeat", 0),
        ("resync_interval", 0),
        ("max_pending", 0),
    ],
)
def test_bad_options_are_rejected(redis_server: Any, option: str, value: float) -> None:
    with pytest.raises(ValueError, match=option):
        RedisStore.from_url(redis_server.url, **{option: value})


def test_bad_namespace_is_rejected(redis_server: Any) -> None:
    with pytest.raises(ValueError, match="namespace"):
        RedisStore.from_url(redis_server.url, namespace="")


def test_malformed_messages_are_ignored(redis_stores: MakeStore) -> None:
    store_a, store_b = redis_stores(), redis_stores()
    a = CircuitBreaker("upstream", failure_threshold=1, store=store_a)
    b = CircuitBreaker("upstream", failure_threshold=1, store=store_b)
    store_a.client.publish(store_a.channel, b"not json")
    store_a.client.publish(store_a.channel, b'{"n": "upstream", "s": "SIDEWAYS"}')
    fail(a)
    eventually(lambda: b.state is State.OPEN, what="later messages still arrive")


def test_a_silent_redis_is_noticed_by_the_heartbeat(own_redis_server: Any, namespace: str) -> None:
    # No calls, so nothing but the subscription's PING can notice that Redis stopped answering.
    import signal

    store = RedisStore.from_url(own_redis_server.url, namespace=namespace, heartbeat=0.2)
    try:
        assert store.wait_ready()
        CircuitBreaker("upstream", store=store)
        own_redis_server.process.send_signal(signal.SIGSTOP)
        try:
            eventually(lambda: not store.online, what="the heartbeat notices")
        finally:
            own_redis_server.process.send_signal(signal.SIGCONT)
        eventually(lambda: store.online, what="and recovers once Redis answers again")
    finally:
        store.close()


def test_members_without_a_consecutive_policy_never_report_counts(
    redis_stores: MakeStore,
) -> None:
    from cascadebreaker import CountWindow, FailureRate

    store_a, store_b = redis_stores(), redis_stores()
    a = CircuitBreaker("upstream", failure_threshold=2, store=store_a)
    rate = FailureRate(window=CountWindow(10), rate=0.5, minimum_calls=5)
    b = CircuitBreaker("upstream", policy=rate, store=store_b)
    fail(a)
    eventually(lambda: shared(store_a).get("fails") == "1", what="a's failure is counted")
    for _ in range(20):
        assert b.call(lambda: "ok") == "ok"
    passes = store_b.flushes
    eventually(lambda: store_b.flushes >= passes + 2, what="b's flusher had its turn")
    assert shared(store_a)["state"] == "CLOSED"  # b sent no count (a threshold of zero would trip)
    assert shared(store_a)["fails"] == "1"
    assert a.state is State.CLOSED and b.state is State.CLOSED


def test_a_view_that_drifted_is_corrected_by_the_next_admission(redis_stores: MakeStore) -> None:
    store = redis_stores()
    breaker = CircuitBreaker("upstream", failure_threshold=1, recovery_timeout=0.1, store=store)
    store.send_trip = lambda *args: None  # type: ignore[method-assign]  # the push is lost
    fail(breaker)
    assert breaker.state is State.OPEN and shared(store)["state"] == "CLOSED"
    eventually(lambda: breaker.retry_after == 0.0)
    assert breaker.call(lambda: "ok") == "ok"  # Redis says CLOSED: admitted, and adopted
    assert breaker.state is State.CLOSED


def test_batches_survive_a_flushed_script_cache(redis_stores: MakeStore) -> None:
    store_a, store_b = redis_stores(), redis_stores()
    a = CircuitBreaker("upstream", failure_threshold=1, store=store_a)
    b = CircuitBreaker("upstream", failure_threshold=1, store=store_b)
    store_a.client.script_flush()  # as after a Redis restart: EVALSHA answers NOSCRIPT
    fail(a)  # the trip goes out on the flusher's pipeline
    eventually(lambda: b.state is State.OPEN, what="the trip arrives anyway")


def test_a_lost_message_is_repaired_by_the_periodic_resync(redis_stores: MakeStore) -> None:
    store = redis_stores(resync_interval=0.2)
    breaker = CircuitBreaker("upstream", store=store)
    breaker.force_open()
    assert breaker.state is State.OPEN
    # Someone resets the breaker but the message never arrives: write the hash, publish nothing.
    version = int(shared(store)["version"]) + 1
    store.client.hset(
        store.key("upstream"), mapping={"mode": "NORMAL", "state": "CLOSED", "version": version}
    )
    eventually(lambda: breaker.state is State.CLOSED, what="the periodic resync repairs the view")
    assert breaker.call(lambda: "ok") == "ok"


def test_a_store_built_on_your_own_client(redis_server: Any, namespace: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_server.url, decode_responses=True, socket_timeout=1.0)
    mine, other = RedisStore(client, namespace), RedisStore.from_url(redis_server.url, namespace)
    try:
        assert mine.wait_ready() and other.wait_ready()
        a = CircuitBreaker("upstream", failure_threshold=1, store=mine)
        b = CircuitBreaker("upstream", failure_threshold=1, store=other)
        fail(a)
        eventually(lambda: b.state is State.OPEN, what="a trip through a decoding client")
        b.reset()
        eventually(lambda: a.state is State.CLOSED, what="and a message back to it")
    finally:
        mine.close()
        other.close()


def test_a_trip_right_after_our_own_probe_closed_the_circuit_counts(
    redis_stores: MakeStore,
) -> None:
    # A process's view closes on its own probe's success before Redis's reply (the close, one
    # version later) comes back; failures right after trip it under the half-open version.
    store = redis_stores()
    breaker = CircuitBreaker("upstream", failure_threshold=1, recovery_timeout=0.1, store=store)
    slot = store.find_slot("upstream")
    assert slot is not None
    fail(breaker)
    eventually(lambda: breaker.retry_after == 0.0)
    probe = breaker.acquire()
    half_open = int(shared(store)["version"])
    probe.success()
    eventually(lambda: shared(store)["state"] == "CLOSED", what="the probe closes it")
    assert int(shared(store)["version"]) == half_open + 1
    no_quorum = ("", 0, 0.0, 0)
    args = (half_open, 1000, "x", 0, "", "", *no_quorum)
    trip = RemoteState.from_reply(store.run("trip", slot, args))
    assert trip.state is State.OPEN  # the closed round this trip saw is the current one
    breaker.reset()
    reset = int(shared(store)["version"])
    args = (reset - 1, 1000, "x", 0, "", "", *no_quorum)
    stale = RemoteState.from_reply(store.run("trip", slot, args))
    assert stale.state is State.CLOSED  # one version behind a reset is another round


def test_a_reconnect_never_undoes_a_trip_still_on_its_way(
    redis_stores: MakeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a resync (the subscriber's first connect, any reconnect) read Redis while
    our own trip was still queued for the flusher, and adopted the CLOSED it found: the local
    breaker went OPEN -> CLOSED -> OPEN, and calls ran against the failing upstream in between.
    The trip on its way is newer than anything that read can show."""
    store = redis_stores()
    breaker = CircuitBreaker("upstream", failure_threshold=1, recovery_timeout=30, store=store)
    assert breaker.call(lambda: "ok") == "ok"  # the shared state exists, CLOSED
    delivered = store._flush  # held below, so the trip stays queued
    gate = threading.Event()

    def held(*args: Any) -> None:
        gate.wait(10)
        delivered(*args)

    monkeypatch.setattr(store, "_flush", held)
    moves: list[tuple[State, State]] = []
    breaker.add_listener(lambda event: moves.append((event.from_state, event.to_state)))
    fail(breaker)
    assert breaker.state is State.OPEN
    store.recover()  # what the subscriber does when it (re)connects
    assert breaker.state is State.OPEN, moves
    with pytest.raises(CircuitOpenError):
        breaker.call(lambda: "ran against the failing upstream")
    gate.set()
    eventually(lambda: shared(store).get("state") == "OPEN", what="the trip is written")
    assert moves == [(State.CLOSED, State.OPEN)]
