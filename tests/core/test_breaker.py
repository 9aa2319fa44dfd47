"""The public facade: sync and async calls, fallbacks, degraded results, control, errors."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from cascadebreaker import (
    CircuitBreaker,
    CircuitOpenError,
    FallbackReason,
    MemoryStore,
    State,
    TransitionEvent,
)

from .conftest import FakeClock


class Down(ConnectionError):
    pass


def boom() -> None:
    raise Down("upstream down")


async def aboom() -> None:
    raise Down("upstream down")


def trip(b: CircuitBreaker, times: int = 2) -> None:
    for _ in range(times):
        with pytest.raises(Down):
            b.call(boom)


@pytest.fixture
def breaker(clock: FakeClock) -> CircuitBreaker:
    return CircuitBreaker(
        "order-api",
        failure_threshold=2,
        recovery_timeout=10.0,
        half_open_max_calls=1,
        clock=clock,
        store=MemoryStore(),
    )


def test_defaults_follow_the_issue() -> None:
    b = CircuitBreaker("defaults")
    assert b.state is State.CLOSED and b.state == "CLOSED"
    cfg = b.config
    assert cfg.policies[0].threshold == 5  # type: ignore[attr-defined]
    assert cfg.backoff.seconds == 30.0  # type: ignore[attr-defined]
    assert cfg.half_open_max_calls == 1


def test_failing_call_reraises_the_original_exception_and_trips(breaker: CircuitBreaker) -> None:
    with pytest.raises(Down, match="upstream down"):
        breaker.call(boom)
    assert breaker.state is State.CLOSED
    with pytest.raises(Down):
        breaker.call(boom)
    assert breaker.state is State.OPEN


def test_rejection_raises_circuit_open_error_with_name_state_and_retry(
    breaker: CircuitBreaker, clock: FakeClock
) -> None:
    trip(breaker)
    clock.advance(4.0)
    ran = []
    with pytest.raises(CircuitOpenError) as info:
        breaker.call(ran.append, 1)
    assert not ran
    err = info.value
    assert (err.name, err.state, err.retry_after) == ("order-api", State.OPEN, 6.0)
    assert "order-api" in str(err)


def test_fallback_gets_a_reason_and_its_value_is_returned(breaker: CircuitBreaker) -> None:
    seen: list[FallbackReason] = []

    def fallback(reason: FallbackReason) -> str:
        seen.append(reason)
        return "cached"

    assert breaker.call(boom, fallback=fallback) == "cached"
    assert isinstance(seen[0].exception, Down) and seen[0].state is State.CLOSED
    assert breaker.call(boom, fallback=fallback) == "cached"
    assert breaker.call(lambda: "live", fallback=fallback) == "cached"  # rejected
    assert seen[-1].exception is None and seen[-1].state is State.OPEN and seen[-1].rejected


def test_a_fallback_that_raises_propagates_and_the_outcome_is_still_recorded(
    breaker: CircuitBreaker,
) -> None:
    def bad_fallback(reason: FallbackReason) -> None:
        raise RuntimeError("fallback broke")

    for _ in range(2):
        with pytest.raises(RuntimeError, match="fallback broke"):
            breaker.call(boom, fallback=bad_fallback)
    assert breaker.state is State.OPEN


def test_half_open_probe_success_closes(breaker: CircuitBreaker, clock: FakeClock) -> None:
    events: list[TransitionEvent] = []
    breaker.add_listener(events.append)
    trip(breaker)
    clock.advance(10.0)
    assert breaker.call(lambda: 42) == 42
    assert breaker.state is State.CLOSED
    assert [(e.from_state, e.to_state) for e in events] == [
        (State.CLOSED, State.OPEN),
        (State.OPEN, State.HALF_OPEN),
        (State.HALF_OPEN, State.CLOSED),
    ]
    assert all(e.name == "order-api" for e in events)


def test_exactly_half_open_max_calls_probes_run_concurrently(clock: FakeClock) -> None:
    b = CircuitBreaker(
        "probes", failure_threshold=1, recovery_timeout=1.0, half_open_max_calls=3, clock=clock
    )
    trip(b, 1)
    clock.advance(1.0)
    release = threading.Event()
    started = threading.Semaphore(0)
    admitted = []
    rejected = []

    def slow_probe() -> None:
        started.release()
        release.wait(10)

    def worker() -> None:
        try:
            b.call(slow_probe)
            admitted.append(1)
        except CircuitOpenError:
            rejected.append(1)

    threads = [threading.Thread(target=worker) for _ in range(20)]
    for t in threads:
        t.start()
    for _ in range(3):
        assert started.acquire(timeout=10)
    # the three probes are inside the user's call: no lock may be held now
    assert b.snapshot()["state"] == "HALF_OPEN"
    release.set()
    for t in threads:
        t.join(10)
    assert len(admitted) == 3 and len(rejected) == 17
    assert b.state is State.CLOSED


def test_no_lock_is_held_across_the_users_call(breaker: CircuitBreaker) -> None:
    inside = threading.Event()
    leave = threading.Event()

    def blocking() -> str:
        inside.set()
        leave.wait(10)
        return "slow"

    t = threading.Thread(target=breaker.call, args=(blocking,))
    t.start()
    assert inside.wait(10)
    # another thread's call (including a failure that takes the record path) proceeds
    with pytest.raises(Down):
        breaker.call(boom)
    assert breaker.call(lambda: "fast") == "fast"
    leave.set()
    t.join(10)


def test_classification_ignore_record_and_predicates(clock: FakeClock) -> None:
    b = CircuitBreaker(
        "cls",
        failure_threshold=1,
        clock=clock,
        record_exceptions=(ConnectionError,),
        ignore_exceptions=(TimeoutError,),
    )
    with pytest.raises(ValueError, match="bad input"):
        b.call(_raise, ValueError("bad input"))  # not recorded: the caller's own error
    with pytest.raises(TimeoutError):
        b.call(_raise, TimeoutError())
    assert b.state is State.CLOSED
    with pytest.raises(ConnectionError):
        b.call(_raise, ConnectionError())
    assert b.state is State.OPEN

    p = CircuitBreaker(
        "pred", failure_threshold=1, clock=clock, is_failure=lambda e: "retryable" in str(e)
    )
    with pytest.raises(RuntimeError):
        p.call(_raise, RuntimeError("fatal"))
    assert p.state is State.CLOSED
    with pytest.raises(RuntimeError):
        p.call(_raise, RuntimeError("retryable"))
    assert p.state is State.OPEN


def test_an_ignored_outcome_does_not_hide_a_failure_run_from_the_next_success(
    clock: FakeClock,
) -> None:
    b = CircuitBreaker("run", failure_threshold=2, clock=clock, ignore_exceptions=(TimeoutError,))
    with pytest.raises(Down):
        b.call(boom)
    with pytest.raises(TimeoutError):
        b.call(_raise, TimeoutError())
    assert b.call(lambda: "ok") == "ok"  # must reset the run of one failure
    with pytest.raises(Down):
        b.call(boom)
    assert b.state is State.CLOSED


def test_result_predicate_counts_failed_results(clock: FakeClock) -> None:
    class Response:
        def __init__(self, status: int) -> None:
            self.status = status

    b = CircuitBreaker(
        "http", failure_threshold=2, clock=clock, result_is_failure=lambda r: r.status >= 500
    )
    assert b.call(Response, 503).status == 503  # returned, but counted
    assert b.call(Response, 404).status == 404  # a 4xx resets the run
    b.call(Response, 500)
    assert b.state is State.CLOSED
    assert b.call(Response, 502, fallback=lambda r: "fb") == "fb"
    assert b.state is State.OPEN


def test_guard_returns_degraded_results_and_never_raises_upstream_errors(
    breaker: CircuitBreaker,
) -> None:
    ok = breaker.guard(lambda: None)
    assert ok.to_dict() == {
        "data": None,
        "isDegraded": False,
        "circuitState": "CLOSED",
        "reason": None,
        "reasonCode": None,
        "trippedBy": None,
        "retryAfter": 0.0,
    }
    failed = breaker.guard(boom, fallback=lambda r: {"items": []})
    assert failed.is_degraded and failed.data == {"items": []}
    assert (failed.to_dict()["reasonCode"], failed.to_dict()["trippedBy"]) == (
        "upstream_error",
        None,
    )
    assert failed.circuit_state is State.CLOSED and "Down" in (failed.reason or "")
    breaker.guard(boom)
    rejected = breaker.guard(lambda: "never")
    assert rejected.is_degraded and rejected.data is None
    assert rejected.to_dict()["circuitState"] == "OPEN"
    # The words of every rejection (docs/contract.md): refused unrun, and why it opened.
    assert (rejected.to_dict()["reasonCode"], rejected.to_dict()["trippedBy"]) == (
        "circuit_open",
        "consecutive_failures",
    )


def test_guard_lets_non_failures_propagate() -> None:
    b = CircuitBreaker("g", record_exceptions=(ConnectionError,))
    with pytest.raises(KeyError):
        b.guard(_raise, KeyError("caller bug"))
    assert b.state is State.CLOSED
    assert b.snapshot()["calls"]["success"] == 1  # the upstream answered; the bug is the caller's


def test_decorator_and_context_manager(breaker: CircuitBreaker) -> None:
    @breaker
    def double(x: int, fallback: str = "kw is the user's own") -> tuple[int, str]:
        return 2 * x, fallback

    assert double(4) == (8, "kw is the user's own")
    assert double.__name__ == "double"
    with breaker:
        pass
    for _ in range(2):
        with pytest.raises(Down), breaker:
            raise Down()
    assert breaker.state is State.OPEN
    with pytest.raises(CircuitOpenError), breaker:
        pytest.fail("body must not run")


async def test_async_call_fallback_decorator_and_context_manager(
    breaker: CircuitBreaker, clock: FakeClock
) -> None:
    async def ok(x: int) -> int:
        await asyncio.sleep(0)
        return x

    assert await breaker.acall(ok, 7) == 7

    async def afallback(reason: FallbackReason) -> str:
        return "async-fb"

    assert await breaker.acall(aboom, fallback=afallback) == "async-fb"
    with pytest.raises(Down):
        await breaker.acall(aboom)
    assert breaker.state is State.OPEN
    with pytest.raises(CircuitOpenError):
        await breaker.acall(ok, 1)

    @breaker
    async def decorated() -> str:
        return "x"

    with pytest.raises(CircuitOpenError):
        await decorated()
    clock.advance(10.0)
    async with breaker:
        pass
    assert breaker.state is State.CLOSED
    assert await decorated() == "x"


async def test_aguard_and_cancellation_is_not_a_failure(breaker: CircuitBreaker) -> None:
    result = await breaker.aguard(aboom, fallback=lambda r: "fb")
    assert result.is_degraded and result.data == "fb"

    started = asyncio.Event()

    async def hang() -> None:
        started.set()
        await asyncio.sleep(60)

    task = asyncio.create_task(breaker.acall(hang))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert breaker.snapshot()["calls"]["ignored"] == 1
    assert breaker.state is State.CLOSED


def test_permit_api_for_proxies(breaker: CircuitBreaker, clock: FakeClock) -> None:
    breaker.acquire().failure()
    p = breaker.acquire()
    p.failure(Down())
    p.success()  # a second outcome on one permit is ignored
    assert breaker.state is State.OPEN
    with pytest.raises(CircuitOpenError):
        breaker.acquire()
    clock.advance(10.0)
    probe = breaker.acquire()
    assert probe.probe
    probe.ignore()
    breaker.acquire().success()
    assert breaker.state is State.CLOSED


def test_manual_control(breaker: CircuitBreaker) -> None:
    breaker.force_open()
    assert breaker.state is State.OPEN
    with pytest.raises(CircuitOpenError) as info:
        breaker.call(lambda: 1)
    assert info.value.retry_after == float("inf")
    breaker.disable()
    for _ in range(10):
        with pytest.raises(Down):
            breaker.call(boom)
    assert breaker.state is State.CLOSED
    breaker.reset()
    trip(breaker)
    assert breaker.state is State.OPEN
    breaker.reset()
    assert breaker.call(lambda: 1) == 1


def test_metrics_only_never_rejects(clock: FakeClock) -> None:
    b = CircuitBreaker("observe", failure_threshold=1, metrics_only=True, clock=clock)
    trip(b, 1)
    assert b.state is State.OPEN
    assert b.call(lambda: "still called") == "still called"


def test_snapshot_counts_outcomes(breaker: CircuitBreaker) -> None:
    breaker.call(lambda: 1)
    trip(breaker)
    with pytest.raises(CircuitOpenError):
        breaker.call(lambda: 1)
    calls = breaker.snapshot()["calls"]
    assert calls == {"success": 1, "failure": 2, "ignored": 0, "rejected": 1}


def test_breakers_sharing_a_memory_store_and_name_share_state(clock: FakeClock) -> None:
    store = MemoryStore()
    a = CircuitBreaker("shared", failure_threshold=1, clock=clock, store=store)
    b = CircuitBreaker("shared", failure_threshold=1, clock=clock, store=store)
    trip(a, 1)
    assert b.state is State.OPEN
    assert store.names() == ["shared"]


def test_listener_errors_do_not_reach_the_caller(breaker: CircuitBreaker) -> None:
    def broken(event: TransitionEvent) -> None:
        raise RuntimeError("listener bug")

    breaker.add_listener(broken)
    trip(breaker)
    assert breaker.state is State.OPEN


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        ({"name": ""}, "name"),
        ({"failure_threshold": 0}, "failure_threshold"),
        ({"failure_threshold": 2.5}, "failure_threshold"),
        ({"recovery_timeout": -1}, "recovery_timeout"),
        ({"recovery_timeout": "10"}, "recovery_timeout"),
        ({"half_open_max_calls": 0}, "half_open_max_calls"),
        ({"half_open_max_calls": 1, "success_threshold": 2}, "success_threshold"),
        ({"clock": 3}, "clock"),
        ({"store": object()}, "store"),
        ({"record_exceptions": (ValueError, 3)}, "record_exceptions"),
        ({"result_is_failure": "yes"}, "result_is_failure"),
    ],
)
def test_invalid_settings_raise_value_error_naming_the_setting(
    kwargs: dict[str, Any], setting: str
) -> None:
    kwargs.setdefault("name", "bad")
    name = kwargs.pop("name")
    with pytest.raises(ValueError, match=setting):
        CircuitBreaker(name, **kwargs)


def _raise(exc: BaseException) -> None:
    raise exc


# A success that began before another call's failure must still end the failure run it
# finishes in: the lock-free closed path re-checks the slot when the call returns. Each form
# inlines that path on its own, so each is checked: the call starts on the fast path, the
# failure lands while it runs (re-entrantly, as another thread's would), then it succeeds.
def _forms(b: CircuitBreaker) -> dict[str, Any]:
    def call(during: Any) -> None:
        b.call(during)

    def decorated(during: Any) -> None:
        b(during)()

    def block(during: Any) -> None:
        with b:
            during()

    def permit(during: Any) -> None:
        p = b.acquire()
        during()
        p.success()

    def async_call(during: Any) -> None:
        async def run() -> None:
            during()

        asyncio.run(b.acall(run))

    def async_decorated(during: Any) -> None:
        async def run() -> None:
            during()

        asyncio.run(b(run)())

    def async_block(during: Any) -> None:
        async def run() -> None:
            async with b:
                during()

        asyncio.run(run())

    return {
        "call": call,
        "decorator": decorated,
        "with": block,
        "permit": permit,
        "acall": async_call,
        "async decorator": async_decorated,
        "async with": async_block,
    }


@pytest.mark.parametrize("form", list(_forms(CircuitBreaker("names"))))
def test_a_success_that_began_before_a_failure_still_ends_the_failure_run(
    clock: FakeClock, form: str
) -> None:
    b = CircuitBreaker("overlap", failure_threshold=2, clock=clock)

    def fail_meanwhile() -> None:
        with pytest.raises(Down):
            b.call(boom)

    _forms(b)[form](fail_meanwhile)  # one failure inside a call that then succeeds
    assert b.snapshot().calls.success == 1
    with pytest.raises(Down):
        b.call(boom)  # would be the run's second failure had the success not ended it
    assert b.state is State.CLOSED
    with pytest.raises(Down):
        b.call(boom)
    assert b.state is State.OPEN  # the run counts again from the success
