"""Celery: a task base that asks the breaker before the body, and retries when it is refused.

    from cascadebreaker.integrations.celery import BreakerTask

    @app.task(base=BreakerTask, bind=True, breaker=payments, max_retries=10)
    def charge(self, order_id): ...

Before the body runs the task takes a permit from `breaker`. Refused (circuit OPEN), the task
does not run and does not hold the worker: it calls `self.retry(countdown=retry_after)`, so it
comes back exactly when the circuit admits a probe. The same happens when the body itself lets
a `CircuitOpenError` escape (a call to another guarded upstream). A circuit forced open has no
time to promise: the task fails with the `CircuitOpenError`, as it does once `max_retries` is
spent. The body's outcome is recorded as the breaker's classifier says; a `Retry` the body asks
for itself is neither success nor failure.

For a fleet of workers, give the breaker a `RedisStore`: every worker then sees one circuit.
"""

from __future__ import annotations

import math
from typing import Any

from celery import Task
from celery.exceptions import Retry

from ..breaker import CircuitBreaker
from ..errors import CircuitOpenError

__all__ = ["BreakerTask"]


class BreakerTask(Task):  # type: ignore[misc]
    """A Celery task base guarded by `breaker` (a task option or a class attribute)."""

    abstract = True
    breaker: CircuitBreaker | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the body through the breaker; retry at `retry_after` when it is refused."""
        breaker = self.breaker
        if breaker is None:
            raise ValueError(f"task {self.name!r} has BreakerTask as base but no breaker= option")
        try:
            permit = breaker.acquire()
        except CircuitOpenError as rejection:
            raise self._retry_later(rejection) from rejection
        try:
            result = super().__call__(*args, **kwargs)
        except Retry:
            permit.ignore()
            raise
        except CircuitOpenError as rejection:  # refused deeper down: not this upstream's fault
            permit.ignore()
            raise self._retry_later(rejection) from rejection
        except BaseException as exc:
            permit.failure(exc)
            raise
        permit.success()
        return result

    def _retry_later(self, rejection: CircuitOpenError) -> BaseException:
        """Schedule the retry and return the `Retry` to raise (the rejection when forced open)."""
        if math.isinf(rejection.retry_after):
            return rejection  # forced open: nothing to wait for
        try:
            # Raises Retry once scheduled, or the rejection itself past max_retries.
            self.retry(exc=rejection, countdown=rejection.retry_after)
        except BaseException as raised:
            return raised
        raise AssertionError("Task.retry returned instead of raising")  # pragma: no cover
