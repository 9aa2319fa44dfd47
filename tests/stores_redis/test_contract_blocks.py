"""`with b:` / `async with b:` settle exactly the permit their own block acquired.

Regression tests for two defects of issue 8, against both stores: blocks took each other's
permits (interleaved generators, tasks inheriting an earlier block from their parent), and a block
exited in another context (another thread, Starlette's `iterate_in_threadpool` over anyio worker
threads) raised LookupError and left a half-open probe unsettled for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from starlette.concurrency import iterate_in_threadpool

from cascadebreaker import CircuitBreaker, State

from .conftest import StorePair, eventually
from .test_contract import RECOVERY, Boom, pair, trip
from .test_contract_rounds import settle

pytestmark = pytest.mark.redis


def when_admitting(breaker: CircuitBreaker) -> None:
    """Wait out the open state (the next call would be a probe)."""
    eventually(lambda: breaker.retry_after == 0.0, timeout=5.0 + RECOVERY, what="wait over")


def stream(breaker: CircuitBreaker, fail: bool = False) -> Iterator[str]:
    """A response body streamed under the breaker (the block spans every chunk)."""
    with breaker:
        yield "first chunk"
        if fail:
            raise Boom("upstream broke mid-stream")
        yield "last chunk"


def test_interleaved_generators_settle_their_own_permits(store_pair: StorePair) -> None:
    a, b = pair(store_pair)
    old_stream = stream(a)
    assert next(old_stream) == "first chunk"  # admitted while CLOSED
    trip(a)
    when_admitting(a)
    probe_stream = stream(a, fail=True)
    assert next(probe_stream) == "first chunk"  # the half-open probe
    assert a.state is State.HALF_OPEN
    assert list(old_stream) == ["last chunk"]  # the old stream ends first: not the probe
    settle(store_pair)
    assert a.state is State.HALF_OPEN, "a stream from before the trip settled the probe"
    with pytest.raises(Boom):
        list(probe_stream)  # the probe fails: its own block reopens the circuit
    eventually(lambda: a.state is State.OPEN and b.state is State.OPEN, what="probe reopens")


async def test_a_task_does_not_take_its_parents_permit(store_pair: StorePair) -> None:
    a, b = pair(store_pair)
    child_inside, parent_done = asyncio.Event(), asyncio.Event()

    async def child() -> None:
        async with a:  # the probe: the task's context is a copy of the parent's
            child_inside.set()
            await parent_done.wait()

    async with a:  # admitted while CLOSED
        trip(a)
        while a.retry_after > 0.0:  # noqa: ASYNC110 - the open wait runs on another clock
            await asyncio.sleep(0.01)
        task = asyncio.create_task(child())
        await child_inside.wait()
        assert a.state is State.HALF_OPEN
    settle(store_pair)
    assert a.state is State.HALF_OPEN, "the parent's block settled the child's probe"
    parent_done.set()
    await task
    while not (a.state is State.CLOSED and b.state is State.CLOSED):  # noqa: ASYNC110
        await asyncio.sleep(0.005)


def test_a_block_exited_on_another_thread_settles_its_probe(store_pair: StorePair) -> None:
    a, b = pair(store_pair)
    trip(a)
    when_admitting(a)
    body = stream(a)
    with ThreadPoolExecutor(max_workers=1) as first, ThreadPoolExecutor(max_workers=1) as second:
        assert first.submit(next, body).result() == "first chunk"  # enters on one thread
        assert a.state is State.HALF_OPEN
        assert second.submit(list, body).result() == ["last chunk"]  # exits on another
    eventually(lambda: a.state is State.CLOSED and b.state is State.CLOSED, what="probe closes")


def test_a_block_exited_on_another_thread_with_an_error_reopens(store_pair: StorePair) -> None:
    a, b = pair(store_pair)
    trip(a)
    when_admitting(a)
    body = stream(a, fail=True)
    errors: list[BaseException] = []
    entered = threading.Thread(target=next, args=(body,))
    entered.start()
    entered.join()

    def finish() -> None:
        try:
            list(body)
        except BaseException as exc:
            errors.append(exc)

    exited = threading.Thread(target=finish)
    exited.start()
    exited.join()
    assert len(errors) == 1 and isinstance(errors[0], Boom)  # not LookupError
    eventually(lambda: a.state is State.OPEN and b.state is State.OPEN, what="probe reopens")


async def test_a_starlette_style_stream_over_worker_threads(store_pair: StorePair) -> None:
    # Starlette runs a sync StreamingResponse body with iterate_in_threadpool: every chunk is
    # produced by anyio.to_thread.run_sync, each in a fresh copy of the request's context.
    a, b = pair(store_pair)
    trip(a)
    while a.retry_after > 0.0:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    chunks = [chunk async for chunk in iterate_in_threadpool(stream(a))]
    assert chunks == ["first chunk", "last chunk"]
    while not (a.state is State.CLOSED and b.state is State.CLOSED):  # noqa: ASYNC110
        await asyncio.sleep(0.005)


async def test_async_generators_interleaved_in_one_task(store_pair: StorePair) -> None:
    a, b = pair(store_pair)

    async def astream(fail: bool = False) -> AsyncIterator[str]:
        async with a:
            yield "first"
            if fail:
                raise Boom("broke mid-stream")
            yield "last"

    old = astream()
    assert await anext(old) == "first"
    trip(a)
    while a.retry_after > 0.0:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    probe = astream(fail=True)
    assert await anext(probe) == "first"
    assert [c async for c in old] == ["last"]
    settle(store_pair)
    assert a.state is State.HALF_OPEN
    with pytest.raises(Boom):
        await anext(probe)
    while not (a.state is State.OPEN and b.state is State.OPEN):  # noqa: ASYNC110
        await asyncio.sleep(0.005)


def test_exit_stacks_and_nested_blocks_settle_their_own_permits(store_pair: StorePair) -> None:
    a, b = pair(store_pair, failure_threshold=1)
    with a, a:
        pass

    def outer_block_fails_long_after_the_trip() -> None:
        with contextlib.ExitStack() as stack:
            stack.enter_context(a)  # admitted while CLOSED
            trip(a, 1)
            when_admitting(a)
            with a:  # the probe, nested inside
                assert a.state is State.HALF_OPEN
            eventually(lambda: a.state is State.CLOSED and b.state is State.CLOSED, what="close")
            raise Boom("the outer block fails")

    with pytest.raises(Boom):
        outer_block_fails_long_after_the_trip()
    settle(store_pair)
    assert a.state is State.CLOSED and b.state is State.CLOSED
