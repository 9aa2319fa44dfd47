"""The saga's compensation retries: retry outside, breaker inside, never into an open circuit."""

from __future__ import annotations

import pytest

from cascadebreaker import CircuitOpenError, State
from cascadebreaker.demo.services.common import DownstreamError
from cascadebreaker.demo.services.order import OrderSaga
from cascadebreaker.demo.topology import COMPENSATION_ATTEMPTS, COMPENSATION_PROBE_WAIT


class Undo:
    """A compensation that raises the given errors in turn, then succeeds."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> None:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)


def refused(retry_after: float) -> DownstreamError:
    """The demo's error for a call its breaker refused (raised from the CircuitOpenError)."""
    try:
        raise CircuitOpenError("payment", State.OPEN, retry_after)
    except CircuitOpenError as exc:
        try:
            raise DownstreamError("payment", 503, "circuit OPEN", refused=True) from exc
        except DownstreamError as wrapped:
            return wrapped


async def test_a_failed_compensation_is_tried_again() -> None:
    undo = Undo(DownstreamError("payment", 502, "reset"))
    await OrderSaga._undo_with_retries(undo)
    assert undo.calls == 2


async def test_a_refusal_with_a_distant_probe_is_not_retried() -> None:
    undo = Undo(refused(COMPENSATION_PROBE_WAIT * 40))
    with pytest.raises(DownstreamError):
        await OrderSaga._undo_with_retries(undo)
    assert undo.calls == 1  # the old loop tried 3 times into the open circuit


async def test_a_refusal_with_a_near_probe_waits_for_it() -> None:
    undo = Undo(refused(0.01))
    await OrderSaga._undo_with_retries(undo)
    assert undo.calls == 2


async def test_attempts_are_bounded() -> None:
    undo = Undo(*[DownstreamError("payment", 502, "reset")] * (COMPENSATION_ATTEMPTS + 1))
    with pytest.raises(DownstreamError):
        await OrderSaga._undo_with_retries(undo)
    assert undo.calls == COMPENSATION_ATTEMPTS
