"""BreakerTask with a real Celery worker on a throwaway redis-server (broker and results)."""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from celery.contrib.testing.worker import start_worker
from celery.signals import task_retry

from cascadebreaker import CircuitBreaker, CircuitOpenError, State
from cascadebreaker.integrations.celery import BreakerTask
from cascadebreaker.testing import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.slow]

# The recovery wait is the countdown the task is retried after: short, so the test is quick.
RECOVERY = 0.3


@pytest.fixture(scope="module")
def worker(redis_server: RedisServer) -> Iterator[dict[str, Any]]:
    """One app and one real worker (solo pool, in a thread) for the module's tests."""
    redis_server.flush()
    app = Celery("shop", broker=redis_server.url, backend=redis_server.url)
    app.conf.update(broker_connection_retry_on_startup=True, task_acks_late=False)
    payments = CircuitBreaker("payments", failure_threshold=1, recovery_timeout=RECOVERY)
    ran: list[str] = []
    countdowns: list[float] = []

    @app.task(base=BreakerTask, bind=True, breaker=payments, max_retries=3)
    def charge(self: BreakerTask, order: str) -> str:
        ran.append(f"{order} try {self.request.retries}")
        if order.startswith("fail"):
            raise ConnectionError("payment gateway down")
        return f"charged {order}"

    forced = CircuitBreaker("forced")

    @app.task(base=BreakerTask, bind=True, breaker=forced)
    def refund(self: BreakerTask, order: str) -> str:
        ran.append(f"refund {order}")
        return "refunded"

    def on_retry(request: Any = None, reason: Any = None, **_: Any) -> None:
        # `reason` is celery's Retry: the exception behind it and the countdown it was given.
        refused = isinstance(getattr(reason, "exc", None), CircuitOpenError)
        countdowns.append(reason.when if refused else -1)

    task_retry.connect(on_retry, weak=False)
    # The embedded worker configures logging: a root handler bound to this test's captured
    # stderr, which later tests' records would hit once that stream is closed. Put it back.
    root_handlers, root_level = logging.root.handlers[:], logging.root.level
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=20):
        yield {
            "charge": charge,
            "refund": refund,
            "payments": payments,
            "forced": forced,
            "ran": ran,
            "countdowns": countdowns,
        }
    task_retry.disconnect(on_retry)
    gc.collect()  # results caught in exception cycles unsubscribe now, while Redis is up
    # Close the result listener before the session's redis-server goes away.
    app.backend.result_consumer.stop()
    app.close()
    logging.root.handlers[:] = root_handlers
    logging.root.setLevel(root_level)


@pytest.fixture
def shop(worker: dict[str, Any]) -> dict[str, Any]:
    """The worker with its records emptied (the plugin has already reset the breakers)."""
    worker["ran"].clear()
    worker["countdowns"].clear()
    return worker


def test_a_refused_task_is_retried_when_the_probe_is_due(shop: dict[str, Any]) -> None:
    charge, payments, ran = shop["charge"], shop["payments"], shop["ran"]
    with pytest.raises(ConnectionError):
        charge.delay("fail-1").get(timeout=30)
    assert payments.state is State.OPEN
    assert charge.delay("a-2").get(timeout=30) == "charged a-2"
    # The body did not run while the circuit was open: first run is the retry, as the probe.
    assert ran == ["fail-1 try 0", "a-2 try 1"]
    assert len(shop["countdowns"]) == 1
    assert 0 < shop["countdowns"][0] <= RECOVERY  # the breaker's retry_after, not a guess
    assert payments.state is State.CLOSED
    assert payments.snapshot()["calls"]["rejected"] == 1


def test_a_forced_open_circuit_fails_the_task_without_running_it(shop: dict[str, Any]) -> None:
    shop["forced"].force_open()
    # Celery's JSON result backend rebuilds exceptions from their args; CircuitOpenError's
    # constructor takes (name, state, retry_after), so the caller sees it by name and message.
    with pytest.raises(Exception, match=r"CircuitOpenError.*'forced' is OPEN"):
        shop["refund"].delay("o-1").get(timeout=30)
    assert shop["ran"] == []
    assert shop["countdowns"] == []
