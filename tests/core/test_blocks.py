"""`with b:` blocks beyond the common shapes: wrappers, abandoned generators, the leak guard."""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from cascadebreaker import CircuitBreaker, State, blocks

from .conftest import FakeClock


class Down(ConnectionError):
    pass


class Wrapper:
    """Calls the breaker's __enter__ and __exit__ from two different methods (not supported:
    it cannot be matched to its block, but it must not raise and must still count)."""

    def __init__(self, breaker: CircuitBreaker) -> None:
        self.breaker = breaker

    def __enter__(self) -> Wrapper:
        self.breaker.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.breaker.__exit__(*exc)


def test_an_exit_in_another_function_counts_for_the_current_round_and_warns_once(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    b = CircuitBreaker("wrapped", failure_threshold=2, clock=clock)
    with caplog.at_level(logging.WARNING, logger="cascadebreaker"):
        for _ in range(2):
            with pytest.raises(Down), Wrapper(b):
                raise Down()
    assert b.state is State.OPEN  # both failures counted
    warnings = [r for r in caplog.records if "another function" in r.getMessage()]
    assert len(warnings) == 1


def test_an_abandoned_generator_settles_its_probe_when_collected(clock: FakeClock) -> None:
    b = CircuitBreaker("gen", failure_threshold=1, recovery_timeout=5.0, clock=clock)
    with pytest.raises(Down):
        b.call(_raise, Down())
    clock.advance(5.0)

    def body() -> Iterator[int]:
        with b:
            yield 1
            yield 2

    stream = body()
    assert next(stream) == 1
    assert b.snapshot().probes_out == 1
    del stream  # the client went away: GeneratorExit is an ignored outcome
    gc.collect()
    assert b.snapshot().probes_out == 0  # the slot is free for the next probe
    assert b.call(lambda: "probe") == "probe"
    assert b.state is State.CLOSED


def test_blocks_that_never_exit_are_bounded(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("cascadebreaker.breaker.MAX_OPEN_BLOCKS", 3)
    b = CircuitBreaker("leaky", clock=clock)

    def enter_and_leave_open() -> None:
        b.__enter__()  # misuse: no __exit__

    for _ in range(10):
        enter_and_leave_open()
    assert len(b._blocks) <= 4
    with b:  # the breaker still works
        pass
    assert blocks.MAX_OPEN_BLOCKS == 10_000


def _raise(exc: BaseException) -> None:
    raise exc


def test_an_exit_stack_inside_a_block_settles_its_own_entry(clock: FakeClock) -> None:
    b = CircuitBreaker("stacked", failure_threshold=1, recovery_timeout=5.0, clock=clock)

    def outer_fails_after_the_inner_stack_probed() -> None:
        with b:  # admitted while CLOSED
            with pytest.raises(Down):
                b.call(_raise, Down())  # trips
            clock.advance(5.0)
            with contextlib.ExitStack() as stack:
                stack.enter_context(b)  # the probe, entered from contextlib's frame
                assert b.state is State.HALF_OPEN
            assert b.state is State.CLOSED  # the stack's exit settled the probe
            raise Down("the outer block fails, after the trip")

    with pytest.raises(Down):
        outer_fails_after_the_inner_stack_probed()
    assert b.state is State.CLOSED  # the outer block's round is over: its failure is stale


async def test_an_async_exit_stack_settles_its_own_entry(clock: FakeClock) -> None:
    b = CircuitBreaker("astacked", failure_threshold=1, recovery_timeout=5.0, clock=clock)
    async with b:
        with pytest.raises(Down):
            b.call(_raise, Down())
        clock.advance(5.0)
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(b)
            assert b.state is State.HALF_OPEN
        assert b.state is State.CLOSED
    assert b.state is State.CLOSED
