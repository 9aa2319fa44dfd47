"""Half-open judged by a window of probes, slow probes, and why it is open: both stores alike."""

from __future__ import annotations

import time

import pytest

from cascadebreaker import (
    CircuitOpenError,
    ConsecutiveFailures,
    CountWindow,
    Reason,
    Scope,
    SlowCallRate,
    State,
)

from .conftest import StorePair, eventually
from .test_contract import LONG, Boom, acquire_when_admitted, pair, trip
from .test_contract_rounds import settle

pytestmark = pytest.mark.redis


def test_a_window_of_probes_closes_despite_one_failure(store_pair: StorePair) -> None:
    a, b = pair(store_pair, half_open_max_calls=3, half_open_failure_rate=0.5)
    trip(a)
    probes = [acquire_when_admitted(a) for _ in range(3)]
    assert all(p.probe for p in probes)
    probes[0].failure(Boom("one bad probe"))
    settle(store_pair)
    assert a.state is State.HALF_OPEN  # classic mode would have reopened here
    probes[1].success()
    probes[2].success()
    eventually(lambda: a.state is State.CLOSED and b.state is State.CLOSED, what="1/3 failed")


def test_a_window_of_probes_reopens_on_its_failure_rate(store_pair: StorePair) -> None:
    a, b = pair(store_pair, half_open_max_calls=3, half_open_failure_rate=0.5)
    trip(a)
    probes = [acquire_when_admitted(a) for _ in range(3)]
    probes[0].success()
    probes[1].failure(Boom("bad"))
    probes[2].failure(Boom("bad again"))
    # b may still show the first trip's OPEN (its view can skip the short HALF_OPEN): wait for
    # the reopening itself, known by its reason.
    eventually(
        lambda: a.state is State.OPEN and b.snapshot().reason == Reason.PROBE_FAILED,
        what="2/3 failed",
    )
    assert b.state is State.OPEN


def test_a_still_slow_upstream_does_not_reclose(store_pair: StorePair) -> None:
    slow = SlowCallRate(duration=0.05, window=CountWindow(4), rate=0.5, minimum_calls=2)
    a, b = pair(store_pair, policy=[ConsecutiveFailures(2), slow], recovery_timeout=0.2)
    for _ in range(2):
        a.call(time.sleep, 0.06)  # slow successes trip the slow-call policy
    assert a.state is State.OPEN and a.snapshot().reason == Reason.SLOW_CALL_RATE
    probe = acquire_when_admitted(a)
    time.sleep(0.06)  # the upstream answers, still slowly
    probe.success()
    eventually(lambda: a.state is State.OPEN and b.state is State.OPEN, what="slow probe reopens")
    assert a.snapshot().reason == Reason.PROBE_SLOW
    fast = acquire_when_admitted(b)
    fast.success()  # a fast probe closes it
    eventually(lambda: a.state is State.CLOSED and b.state is State.CLOSED, what="fast closes")


def test_every_sharer_says_why_it_is_open(store_pair: StorePair) -> None:
    a, b = pair(store_pair, recovery_timeout=LONG)
    trip(a)  # raises Boom("upstream down")
    eventually(lambda: b.state is State.OPEN, what="b sees the trip")
    with pytest.raises(CircuitOpenError) as info:
        b.call(lambda: None)
    err = info.value
    assert err.reason == Reason.CONSECUTIVE_FAILURES
    assert err.last_failure is not None
    assert (err.last_failure.type, err.last_failure.message) == ("Boom", "upstream down")
    shared = store_pair[0] is not store_pair[1]
    assert err.scope is (Scope.SHARED if shared else Scope.LOCAL)
    snapshot = b.snapshot()
    assert snapshot.reason == "consecutive_failures" and snapshot.detail
    assert snapshot.to_dict()["lastFailure"] == {"type": "Boom", "message": "upstream down"}
