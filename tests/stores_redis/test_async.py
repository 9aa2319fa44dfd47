"""RedisStore from asyncio: fleet questions go to a worker thread, never block the event loop."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable
from typing import Any

import pytest

from cascadebreaker import CircuitBreaker, CircuitOpenError, RedisStore, State
from cascadebreaker.stores.redis_scripts import RemoteState
from cascadebreaker.stores.redis_slot import RedisSlot

pytestmark = pytest.mark.redis


async def afail() -> None:
    raise RuntimeError("upstream down")


async def aok() -> str:
    return "ok"


async def until(predicate: Callable[[], bool]) -> None:
    """Await `predicate()`, with a generous deadline (not a timing assertion)."""
    async with asyncio.timeout(5.0):
        while not predicate():  # noqa: ASYNC110 - state set by another thread; poll it
            await asyncio.sleep(0.002)


async def open_then_wait_out(breaker: CircuitBreaker) -> None:
    with pytest.raises(RuntimeError):
        await breaker.acall(afail)
    assert breaker.state is State.OPEN
    await until(lambda: breaker.retry_after == 0.0)


async def test_probe_admission_runs_off_the_loop_thread(redis_server: Any, namespace: str) -> None:
    store = RedisStore.from_url(redis_server.url, namespace=namespace)
    try:
        breaker = CircuitBreaker("upstream", failure_threshold=1, recovery_timeout=0.1, store=store)
        threads: list[threading.Thread] = []
        real_admit = store.run_admit

        def spy(slot: RedisSlot) -> RemoteState | None:
            threads.append(threading.current_thread())
            return real_admit(slot)

        store.run_admit = spy  # type: ignore[method-assign]
        await open_then_wait_out(breaker)
        while True:  # Redis's open wait may end a hair after the local view's
            try:
                assert await breaker.acall(aok) == "ok"
                break
            except CircuitOpenError:
                await asyncio.sleep(0.01)
        assert threads and all(t is not threading.main_thread() for t in threads)
        await until(lambda: breaker.state is State.CLOSED)
        async with breaker:  # the async context manager uses the same admission
            pass
    finally:
        store.close()


async def test_a_frozen_redis_does_not_block_the_loop(
    own_redis_server: Any, namespace: str
) -> None:
    store = RedisStore.from_url(own_redis_server.url, namespace=namespace, socket_timeout=0.5)
    frozen = False
    try:
        assert store.wait_ready()
        breaker = CircuitBreaker("upstream", failure_threshold=1, recovery_timeout=0.1, store=store)
        await open_then_wait_out(breaker)
        own_redis_server.process.send_signal(signal.SIGSTOP)  # Redis hangs: no reply, no error
        frozen = True
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        ticking = asyncio.create_task(ticker())
        result = await breaker.acall(aok)  # waits out the socket timeout on a worker thread
        ticks_during_call = ticks
        ticking.cancel()
        assert result == "ok"  # Redis timed out: the local machine admitted a probe
        assert ticks_during_call > 0  # the loop kept running other tasks meanwhile
        assert not store.online
    finally:
        if frozen:
            own_redis_server.process.send_signal(signal.SIGCONT)
        store.close()
