"""Permits are bound to their round: an outcome settles only the round its call was admitted in.

Regression tests for two defects of issue 8, run against both stores (one MemoryStore seen
twice, or two RedisStores in one namespace):

1. a call admitted before a trip must not count after the circuit re-closed;
2. a probe from an earlier half-open round must not settle (or free a slot of) the current one.
"""

from __future__ import annotations

from typing import Any

import pytest

from cascadebreaker import CircuitBreaker, CircuitOpenError, RedisStore, State

from .conftest import StorePair, eventually
from .test_contract import Boom, acquire_when_admitted, pair, trip

pytestmark = pytest.mark.redis


def settle(stores: StorePair) -> None:
    """Let RedisStores push what they queued (two flusher passes each); no-op for memory."""
    for store in stores:
        if isinstance(store, RedisStore):
            target = store.flushes + 2

            def passed(s: RedisStore = store, n: int = target) -> bool:
                s.wake_flusher()  # an idle flusher would otherwise sleep up to a second
                return s.flushes >= n

            eventually(passed, what="flusher passes")


def reclose(a: CircuitBreaker, b: CircuitBreaker) -> None:
    """Wait out the open state, close the circuit with one probe, and see both views close."""
    eventually(lambda: b.state is State.OPEN, what="the trip reaches b")
    probe = acquire_when_admitted(b)
    assert probe.probe
    probe.success()
    eventually(lambda: a.state is State.CLOSED and b.state is State.CLOSED, what="both close")


def test_a_call_admitted_before_a_trip_never_counts_after_the_circuit_recloses(
    store_pair: StorePair,
) -> None:
    a, b = pair(store_pair, failure_threshold=2)
    old = a.acquire()  # admitted while CLOSED, still running through everything below
    trip(a)
    reclose(a, b)
    with pytest.raises(Boom):
        a.call(_boom)  # one failure of the new round
    old.failure(Boom("the old call fails at last"))
    settle(store_pair)
    assert a.state is State.CLOSED and b.state is State.CLOSED
    assert a.call(lambda: "ok") == "ok"


def test_a_success_admitted_before_a_trip_does_not_reset_the_new_failure_run(
    store_pair: StorePair,
) -> None:
    a, b = pair(store_pair, failure_threshold=2)
    old = a.acquire()
    trip(a)
    reclose(a, b)
    with pytest.raises(Boom):
        a.call(_boom)
    old.success()  # belongs to the round before the trip: must not break the new run
    with pytest.raises(Boom):
        a.call(_boom)
    eventually(lambda: a.state is State.OPEN and b.state is State.OPEN, what="two in a row trip")


def test_a_stale_ignored_probe_does_not_give_its_slot_to_the_next_round(
    store_pair: StorePair,
) -> None:
    a, b = pair(store_pair, half_open_max_calls=2)
    trip(a)
    first, second = acquire_when_admitted(a), acquire_when_admitted(a)
    assert first.probe and second.probe
    first.failure(Boom("still down"))  # round 1 reopens; `second` is still running
    eventually(lambda: b.state is State.OPEN, what="b sees the reopen")
    third, fourth = acquire_when_admitted(a), acquire_when_admitted(a)  # round 2
    assert third.probe and fourth.probe
    second.ignore()  # a round-1 probe: must not free a round-2 slot
    settle(store_pair)
    with pytest.raises(CircuitOpenError):
        b.acquire()  # round 2's budget of two is still spent
    third.success()
    fourth.success()
    eventually(lambda: a.state is State.CLOSED and b.state is State.CLOSED, what="round 2 closes")


def test_a_stale_probe_success_does_not_close_the_next_round(store_pair: StorePair) -> None:
    a, b = pair(store_pair, half_open_max_calls=2)
    trip(a)
    first, second = acquire_when_admitted(a), acquire_when_admitted(a)
    first.failure(Boom("still down"))
    eventually(lambda: b.state is State.OPEN, what="b sees the reopen")
    third, fourth = acquire_when_admitted(a), acquire_when_admitted(a)
    third.success()
    second.success()  # round 1's result: round 2 has one success of its own, not two
    settle(store_pair)
    assert a.state is State.HALF_OPEN and b.state is not State.CLOSED
    fourth.failure(Boom("round 2's real failure"))
    eventually(lambda: a.state is State.OPEN and b.state is State.OPEN, what="round 2 reopens")


def test_a_probe_that_never_reports_expires(store_pair: StorePair) -> None:
    a, b = pair(store_pair, probe_timeout=0.3)
    trip(a)
    lost = acquire_when_admitted(a)  # its caller died: it will never report
    assert lost.probe
    with pytest.raises(CircuitOpenError):
        b.acquire()  # the budget of one is spent
    probe = acquire_when_admitted(b)  # until the lost probe's lease runs out
    assert probe.probe
    probe.success()
    eventually(lambda: a.state is State.CLOSED and b.state is State.CLOSED, what="both close")
    lost.ignore()  # reports at last: changes nothing (its round is over)
    settle(store_pair)
    assert a.state is State.CLOSED


def test_an_expired_probe_that_reports_ignored_does_not_free_a_second_slot(
    store_pair: StorePair,
) -> None:
    a, b = pair(store_pair, probe_timeout=1.0)  # long enough to look before it runs out again
    trip(a)
    slow = acquire_when_admitted(a)
    replacement = acquire_when_admitted(b)  # admitted once `slow`'s lease ran out
    slow.ignore()  # same round, but its slot was already taken back
    settle(store_pair)
    with pytest.raises(CircuitOpenError):
        a.acquire()  # still one probe out: `replacement`
    replacement.success()
    eventually(lambda: a.state is State.CLOSED and b.state is State.CLOSED, what="both close")


def _boom() -> Any:
    raise Boom("upstream down")
