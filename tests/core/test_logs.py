"""The built-in logging listener: transitions at WARNING with structured extra, once per slot."""

from __future__ import annotations

import logging

import pytest

from cascadebreaker import CircuitBreaker, MemoryStore
from cascadebreaker.logs import LOGGER_NAME, OutcomeLogger

from .conftest import FakeClock


def test_transitions_are_logged_at_warning_with_structured_fields(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    breaker = CircuitBreaker("payment", failure_threshold=1, recovery_timeout=7, clock=clock)
    with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
        breaker.acquire().failure()
        clock.advance(7)
        breaker.acquire().success()
    records = [r for r in caplog.records if r.name == LOGGER_NAME]
    assert [(r.from_state, r.to_state) for r in records] == [  # type: ignore[attr-defined]
        ("CLOSED", "OPEN"),
        ("OPEN", "HALF_OPEN"),
        ("HALF_OPEN", "CLOSED"),
    ]
    opened = records[0]
    assert opened.levelno == logging.WARNING
    assert opened.breaker == "payment"  # type: ignore[attr-defined]
    assert opened.retry_after == 7.0  # type: ignore[attr-defined]
    assert opened.reason == "consecutive_failures"  # type: ignore[attr-defined]
    assert opened.detail == "1 consecutive failures"  # type: ignore[attr-defined]
    assert opened.scope == "local"  # type: ignore[attr-defined]
    assert "(consecutive_failures: 1 consecutive failures)" in opened.getMessage()
    assert "payment" in opened.getMessage() and "OPEN" in opened.getMessage()


def test_calls_are_not_logged_by_default(caplog: pytest.LogCaptureFixture) -> None:
    breaker = CircuitBreaker("quiet")
    with caplog.at_level(logging.DEBUG):
        breaker.call(lambda: 1)
    assert not caplog.records


def test_one_log_line_per_transition_for_breakers_sharing_a_slot(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore()
    first = CircuitBreaker("shared", failure_threshold=1, store=store)
    CircuitBreaker("shared", failure_threshold=1, store=store)
    with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
        first.acquire().failure()
    assert len(caplog.records) == 1


def test_logging_can_be_turned_off(caplog: pytest.LogCaptureFixture) -> None:
    breaker = CircuitBreaker("silent", failure_threshold=1, log_transitions=False)
    with caplog.at_level(logging.DEBUG):
        breaker.acquire().failure()
    assert not caplog.records


def test_outcome_logging_is_opt_in(caplog: pytest.LogCaptureFixture) -> None:
    breaker = CircuitBreaker("chatty", failure_threshold=1)
    breaker.add_outcome_listener(OutcomeLogger())
    with caplog.at_level(logging.DEBUG, logger="cascadebreaker.calls"):
        breaker.call(lambda: 1)
        breaker.force_open()
        with pytest.raises(Exception, match="rejected"):
            breaker.call(lambda: 1)
    outcomes = [r.outcome for r in caplog.records if r.name == "cascadebreaker.calls"]  # type: ignore[attr-defined]
    assert outcomes == ["success", "rejected"]


def test_a_dropped_breaker_is_freed_at_once() -> None:
    # The logging listener must not tie the breaker into a reference cycle.
    import weakref

    ref = weakref.ref(CircuitBreaker("short-lived"))
    assert ref() is None
