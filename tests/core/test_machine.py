"""The pure state machine, driven directly with explicit clock times."""

from __future__ import annotations

import pytest

from cascadebreaker.core import (
    Admission,
    BreakerConfig,
    BreakerMachine,
    ConsecutiveFailures,
    CountWindow,
    ExponentialBackoff,
    FailureRate,
    FixedBackoff,
    Outcome,
    Reason,
    SlowCallRate,
    State,
    TimeWindow,
)

F, S, IGN = Outcome.FAILURE, Outcome.SUCCESS, Outcome.IGNORED


def machine(**kw: object) -> BreakerMachine:
    return BreakerMachine(BreakerConfig(**kw), jitter=lambda: 0.5)  # type: ignore[arg-type]


def test_consecutive_failures_trip_and_success_resets_the_run() -> None:
    m = machine(policies=(ConsecutiveFailures(3),))
    for outcome in (F, F, S, F, F):
        m.record(0.0, outcome, probe=False)
    assert m.state is State.CLOSED  # the success broke the run: the article's bug is not ours
    (t,) = m.record(0.0, F, probe=False)
    assert (t.from_state, t.to_state) == (State.CLOSED, State.OPEN)
    assert t.reason == Reason.CONSECUTIVE_FAILURES == "consecutive_failures"
    assert t.detail == "3 consecutive failures"


def test_open_rejects_until_wait_is_over_then_half_open_admits_exactly_the_probe_budget() -> None:
    m = machine(
        policies=(ConsecutiveFailures(1),),
        backoff=FixedBackoff(10.0),
        half_open_max_calls=2,
        success_threshold=2,
    )
    m.record(0.0, F, probe=False)
    assert m.admit(9.99)[0] is Admission.REJECT
    assert m.retry_after(4.0) == pytest.approx(6.0)
    admission, transitions = m.admit(10.0)
    assert admission is Admission.PROBE
    assert [t.to_state for t in transitions] == [State.HALF_OPEN]
    assert m.admit(10.0)[0] is Admission.PROBE
    assert m.admit(10.0)[0] is Admission.REJECT  # budget of 2 spent
    assert m.record(10.1, S, probe=True) == ()
    (t,) = m.record(10.2, S, probe=True)
    assert t.to_state is State.CLOSED


def test_probe_failure_reopens_and_ignored_probe_frees_its_slot() -> None:
    m = machine(policies=(ConsecutiveFailures(1),), backoff=FixedBackoff(5.0))
    m.record(0.0, F, probe=False)
    assert m.admit(5.0)[0] is Admission.PROBE
    m.record(5.0, IGN, probe=True)
    assert m.admit(5.0)[0] is Admission.PROBE  # the ignored probe gave its slot back
    (t,) = m.record(5.1, F, probe=True)
    assert t.to_state is State.OPEN
    assert m.open_until == pytest.approx(10.1)


def test_max_half_open_time_reopens_when_probes_never_report() -> None:
    m = machine(
        policies=(ConsecutiveFailures(1),), backoff=FixedBackoff(1.0), max_half_open_time=3.0
    )
    m.record(0.0, F, probe=False)
    assert m.admit(1.0)[0] is Admission.PROBE  # this probe is lost
    assert m.admit(2.0)[0] is Admission.REJECT
    admission, (t,) = m.admit(4.0)
    assert admission is Admission.REJECT and t.to_state is State.OPEN
    assert m.admit(5.0)[0] is Admission.PROBE


def test_outcomes_of_calls_started_before_a_trip_do_not_count() -> None:
    m = machine(policies=(ConsecutiveFailures(1),))
    m.record(0.0, F, probe=False)
    assert m.record(0.1, S, probe=False) == ()
    assert m.state is State.OPEN


def test_count_window_failure_rate_waits_for_minimum_calls() -> None:
    m = machine(policies=(FailureRate(CountWindow(4), rate=0.5, minimum_calls=4),))
    for outcome in (F, F, F):
        assert m.record(0.0, outcome, probe=False) == ()
    (t,) = m.record(0.0, S, probe=False)  # 3/4 failed
    assert t.to_state is State.OPEN and t.reason == "failure_rate"
    assert "failures 3/4" in t.detail


def test_count_window_slides() -> None:
    m = machine(policies=(FailureRate(CountWindow(4), rate=0.75, minimum_calls=4),))
    for outcome in (F, F, S, S, S, F, F):  # window now S,S,F,F → 50%
        assert m.record(0.0, outcome, probe=False) == ()
    (t,) = m.record(0.0, F, probe=False)  # S,F,F,F → 75%
    assert t.to_state is State.OPEN


def test_time_window_forgets_old_failures() -> None:
    m = machine(policies=(FailureRate(TimeWindow(10.0, buckets=10), rate=0.5, minimum_calls=3),))
    m.record(0.0, F, probe=False)
    m.record(1.0, F, probe=False)
    # 20 s later both failures have left the window: 1 failure out of 3 recent calls
    m.record(21.0, S, probe=False)
    assert m.record(21.5, S, probe=False) == ()
    assert m.record(22.0, F, probe=False) == ()
    assert m.state is State.CLOSED
    (t,) = m.record(22.5, F, probe=False)  # now 2/4 = 50%
    assert t.to_state is State.OPEN


def test_slow_calls_trip_at_their_own_rate() -> None:
    m = machine(
        policies=(
            ConsecutiveFailures(100),
            SlowCallRate(duration=1.0, window=CountWindow(4), rate=0.5, minimum_calls=4),
        )
    )
    for d in (0.1, 2.0, 0.1):
        assert m.record(0.0, S, probe=False, duration=d) == ()
    (t,) = m.record(0.0, S, probe=False, duration=1.5)
    assert t.to_state is State.OPEN and t.reason == "slow_call_rate"
    assert "slow calls 2/4" in t.detail


def test_exponential_backoff_grows_caps_and_resets_on_close() -> None:
    backoff = ExponentialBackoff(initial=1.0, maximum=5.0, multiplier=2.0, jitter=0.0)
    m = machine(policies=(ConsecutiveFailures(1),), backoff=backoff)
    now = 0.0
    waits = []
    for _ in range(5):
        m.record(now, F, probe=False) if m.state is State.CLOSED else None
        waits.append(m.open_until - now)
        now = m.open_until
        assert m.admit(now)[0] is Admission.PROBE
        m.record(now, F, probe=True)
    assert waits[:4] == [1.0, 2.0, 4.0, 5.0]
    now = m.open_until
    m.admit(now)
    m.record(now, S, probe=True)
    assert m.state is State.CLOSED and m.opens == 0


def test_jitter_spreads_the_wait_within_bounds() -> None:
    backoff = ExponentialBackoff(initial=10.0, maximum=10.0, jitter=0.2)
    assert backoff.delay(1, 0.0) == pytest.approx(8.0)
    assert backoff.delay(1, 1.0) == pytest.approx(12.0)


def test_force_open_disable_reset() -> None:
    m = machine()
    (t,) = m.force_open(0.0)
    assert t.to_state is State.OPEN and m.admit(1e9)[0] is Admission.REJECT
    assert m.retry_after(0.0) == float("inf")
    m.reset(1.0)
    assert m.state is State.CLOSED and m.admit(1.0)[0] is Admission.ADMIT
    m.disable(2.0)
    for _ in range(100):
        m.record(2.0, F, probe=False)
    assert m.visible_state is State.CLOSED and m.admit(2.0)[0] is Admission.ADMIT


def test_metrics_only_transitions_but_never_rejects() -> None:
    m = machine(policies=(ConsecutiveFailures(1),), metrics_only=True)
    (t,) = m.record(0.0, F, probe=False)
    assert t.to_state is State.OPEN
    assert m.admit(0.1)[0] is Admission.ADMIT


def test_adopt_takes_only_newer_versions() -> None:
    m = machine()
    (t,) = m.adopt(0.0, State.OPEN, 5, 3.0, "remote trip", 1)
    assert t.to_state is State.OPEN and m.version == 5 and m.retry_after(1.0) == 2.0
    assert m.adopt(0.0, State.CLOSED, 5, 0.0, "stale", 0) == ()
    assert m.state is State.OPEN


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        ({"half_open_max_calls": 0}, "half_open_max_calls"),
        ({"success_threshold": 2}, "success_threshold"),
        ({"max_half_open_time": 0}, "max_half_open_time"),
        ({"policies": ()}, "policy"),
    ],
)
def test_invalid_config_names_the_setting(kwargs: dict[str, object], setting: str) -> None:
    with pytest.raises(ValueError, match=setting):
        BreakerConfig(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("build", "setting"),
    [
        (lambda: ConsecutiveFailures(0), "failure_threshold"),
        (lambda: FailureRate(rate=0.0), "failure_rate"),
        (lambda: FailureRate(minimum_calls=0), "minimum_calls"),
        (lambda: SlowCallRate(duration=0), "slow_call_duration"),
        (lambda: FixedBackoff(-1), "recovery_timeout"),
        (lambda: ExponentialBackoff(initial=2, maximum=1), "backoff.maximum"),
        (lambda: ExponentialBackoff(jitter=1.0), "backoff.jitter"),
        (lambda: CountWindow(0), "window.size"),
        (lambda: TimeWindow(0), "window.seconds"),
    ],
)
def test_invalid_policy_names_the_setting(build: object, setting: str) -> None:
    with pytest.raises(ValueError, match=setting.replace(".", r"\.")):
        build()  # type: ignore[operator]
