"""CircuitBreaker: the public facade. Thin sync and async drivers around a store's slot."""

from __future__ import annotations

import contextvars
import functools
import inspect
import random
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, ParamSpec, TypeVar, overload

from .core.classify import Classifier, ExceptionPredicate, ResultPredicate
from .core.config import BreakerConfig, build_policies
from .core.policies import Backoff, FixedBackoff, TripPolicy
from .core.state import Admission, Outcome, State
from .degraded import FallbackReason, GuardedResult
from .errors import CircuitOpenError
from .events import OutcomeListener, TransitionListener
from .logs import TransitionLogger
from .permit import Permit
from .stores.base import BreakerSlot, Clock, Store
from .stores.memory import MemoryStore

P = ParamSpec("P")
R = TypeVar("R")
Fallback = Callable[[FallbackReason], Any]

_ADMIT = Admission.ADMIT
_REJECT = Admission.REJECT
_PROBE = Admission.PROBE
_SUCCESS = Outcome.SUCCESS
_FAILURE = Outcome.FAILURE
_IGNORED = Outcome.IGNORED

# Every breaker alive in this process, for `cascadebreaker.testing` (reset between tests).
# Touched once per construction, never on the call path.
_live: weakref.WeakSet[CircuitBreaker] = weakref.WeakSet()


def live_breakers() -> list[CircuitBreaker]:
    """The breakers this process holds right now (what test isolation resets)."""
    return list(_live)


class CircuitBreaker:
    """A circuit breaker around calls to one upstream.

    Calls go through `call` / `acall`, the decorator form, `with` / `async with`, `guard` /
    `aguard` (degraded result, never raises for upstream failures) or `acquire` (a permit for
    code that records the outcome itself, such as a proxy).
    State changes are logged at WARNING to `cascadebreaker.transitions` (`log_transitions=False`
    turns that off for this breaker).
    """

    def __init__(
        self,
        name: str,
        failure_threshold: int = 5,
        recovery_timeout: float = 30.0,
        half_open_max_calls: int = 1,
        *,
        success_threshold: int | None = None,
        policy: TripPolicy | Sequence[TripPolicy] | None = None,
        backoff: Backoff | None = None,
        max_half_open_time: float | None = None,
        record_exceptions: tuple[type[BaseException], ...] = (Exception,),
        ignore_exceptions: tuple[type[BaseException], ...] = (),
        is_failure: ExceptionPredicate | None = None,
        result_is_failure: ResultPredicate | None = None,
        metrics_only: bool = False,
        clock: Clock = time.monotonic,
        store: Store | None = None,
        listeners: Sequence[TransitionListener] = (),
        jitter: Callable[[], float] = random.random,
        log_transitions: bool = True,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        if not callable(clock):
            raise ValueError(f"clock must be a zero-argument callable, got {clock!r}")
        if backoff is None:
            if isinstance(recovery_timeout, bool) or not isinstance(recovery_timeout, int | float):
                raise ValueError(f"recovery_timeout must be a number, got {recovery_timeout!r}")
            backoff = FixedBackoff(float(recovery_timeout))
        if success_threshold is None:
            success_threshold = half_open_max_calls if isinstance(half_open_max_calls, int) else 1
        self.config = BreakerConfig(
            policies=build_policies(failure_threshold, policy),
            backoff=backoff,
            half_open_max_calls=half_open_max_calls,
            success_threshold=success_threshold,
            max_half_open_time=max_half_open_time,
            metrics_only=metrics_only,
            classifier=Classifier(
                record_exceptions, ignore_exceptions, is_failure, result_is_failure
            ),
        )
        if store is None:
            store = MemoryStore()
        elif not isinstance(store, Store):
            raise ValueError(f"store must implement the Store protocol, got {store!r}")
        self.name = name
        self.store = store
        self._slot: BreakerSlot = store.slot(name, self.config, clock)
        self._slot.machine.jitter = jitter
        self._classifier = self.config.classifier
        self._result_check = result_is_failure
        self._clock = clock
        self._entered: contextvars.ContextVar[list[Permit | None]] = contextvars.ContextVar(
            f"ccb-permits-{name}-{id(self)}"
        )
        for listener in listeners:
            self.add_listener(listener)
        # Breakers of one name and store share a slot: log its transitions once.
        if log_transitions and not any(
            isinstance(known, TransitionLogger) for known in self._slot.transition_listeners
        ):
            self.add_listener(TransitionLogger(self))
        _live.add(self)

    # -- state and control -----------------------------------------------------------------

    @property
    def state(self) -> State:
        """CLOSED, OPEN or HALF_OPEN (an OPEN circuit whose wait is over still reads OPEN)."""
        return self._slot.machine.visible_state

    @property
    def retry_after(self) -> float:
        """Seconds until an OPEN circuit admits a probe (0.0 when calls are admitted)."""
        return self._slot.retry_after()

    def force_open(self) -> None:
        """Reject every call until `reset()`."""
        self._slot.control("force_open")

    def disable(self) -> None:
        """Let every call through and record nothing until `reset()`."""
        self._slot.control("disable")

    def reset(self) -> None:
        """Back to CLOSED with fresh counters, leaving forced or disabled mode."""
        self._slot.control("reset")

    def add_listener(self, listener: TransitionListener) -> None:
        """Call `listener(TransitionEvent)` on every state change."""
        self._slot.transition_listeners.append(listener)

    def add_outcome_listener(self, listener: OutcomeListener) -> None:
        """Call `listener(OutcomeEvent)` after every call (costs the lock-free closed path)."""
        self._slot.add_outcome_listener(listener)

    def snapshot(self) -> dict[str, Any]:
        """State and counters as a JSON-friendly dict."""
        return self._slot.snapshot()

    def __repr__(self) -> str:
        return f"<CircuitBreaker {self.name!r} {self.state.value}>"

    # -- permits ---------------------------------------------------------------------------

    def acquire(self) -> Permit:
        """Admit one call or raise CircuitOpenError; record the outcome on the permit."""
        slot = self._slot
        admission = _ADMIT if slot.fast else slot.admit()
        return self._permit(admission)

    async def aacquire(self) -> Permit:
        """Async twin of `acquire` (shared stores may ask their server off the closed path)."""
        slot = self._slot
        admission = _ADMIT if slot.fast else await slot.aadmit()
        return self._permit(admission)

    def _permit(self, admission: Admission) -> Permit:
        if admission is _REJECT:
            self._slot.rejected()
            raise self._open_error()
        slot = self._slot
        return Permit(
            slot, self._classifier, admission is _PROBE, slot.clock() if slot.timed else 0.0
        )

    def _open_error(self) -> CircuitOpenError:
        return CircuitOpenError(self.name, self.state, self._slot.retry_after())

    # -- sync calls --------------------------------------------------------------------------

    def call(
        self, fn: Callable[..., R], /, *args: Any, fallback: Fallback | None = None, **kwargs: Any
    ) -> R:
        """Run `fn(*args, **kwargs)` through the breaker."""
        slot = self._slot
        if slot.fast:
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                return self._failed(exc, False, 0.0, fallback)  # type: ignore[no-any-return]
            if slot.dirty or self._result_check is not None:
                return self._settle(result, False, 0.0, fallback)  # type: ignore[no-any-return]
            slot.successes += 1
            return result
        return self._call_slow(fn, args, kwargs, fallback)  # type: ignore[no-any-return]

    def _call_slow(
        self, fn: Callable[..., Any], args: Any, kwargs: Any, fallback: Fallback | None
    ) -> Any:
        slot = self._slot
        admission = slot.admit()
        if admission is _REJECT:
            return self._reject(fallback)
        probe = admission is _PROBE
        start = slot.clock() if slot.timed else 0.0
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            return self._failed(exc, probe, start, fallback)
        return self._settle(result, probe, start, fallback)

    def guard(
        self, fn: Callable[..., R], /, *args: Any, fallback: Fallback | None = None, **kwargs: Any
    ) -> GuardedResult[R]:
        """Run `fn` and return a GuardedResult; upstream failures become degraded results."""
        slot = self._slot
        admission = _ADMIT if slot.fast else slot.admit()
        if admission is _REJECT:
            slot.rejected()
            return self._degraded(None, fallback)
        probe = admission is _PROBE
        start = slot.clock() if slot.timed else 0.0
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            outcome = self._record_exception(exc, probe, start)
            if outcome is _IGNORED and not isinstance(exc, Exception):
                raise
            if outcome is not _FAILURE:
                raise
            return self._degraded(exc, fallback)
        if self._classified_result(result, probe, start) is _FAILURE:
            return self._degraded(None, fallback, data=result, failed_result=True)
        return GuardedResult(result, False, self.state, None)

    # -- async calls -------------------------------------------------------------------------

    async def acall(
        self,
        fn: Callable[..., Awaitable[R]],
        /,
        *args: Any,
        fallback: Fallback | None = None,
        **kwargs: Any,
    ) -> R:
        """Await `fn(*args, **kwargs)` through the breaker."""
        slot = self._slot
        if slot.fast:
            try:
                result = await fn(*args, **kwargs)
            except BaseException as exc:
                return await self._afailed(exc, False, 0.0, fallback)  # type: ignore[no-any-return]
            if slot.dirty or self._result_check is not None:
                return await self._asettle(result, False, 0.0, fallback)  # type: ignore[no-any-return]
            slot.successes += 1
            return result
        return await self._acall_slow(fn, args, kwargs, fallback)  # type: ignore[no-any-return]

    async def _acall_slow(
        self, fn: Callable[..., Awaitable[Any]], args: Any, kwargs: Any, fallback: Fallback | None
    ) -> Any:
        slot = self._slot
        admission = await slot.aadmit()
        if admission is _REJECT:
            return await self._areject(fallback)
        probe = admission is _PROBE
        start = slot.clock() if slot.timed else 0.0
        try:
            result = await fn(*args, **kwargs)
        except BaseException as exc:
            return await self._afailed(exc, probe, start, fallback)
        return await self._asettle(result, probe, start, fallback)

    async def aguard(
        self,
        fn: Callable[..., Awaitable[R]],
        /,
        *args: Any,
        fallback: Fallback | None = None,
        **kwargs: Any,
    ) -> GuardedResult[R]:
        """Async twin of `guard`."""
        slot = self._slot
        admission = _ADMIT if slot.fast else await slot.aadmit()
        if admission is _REJECT:
            slot.rejected()
            return await self._adegraded(None, fallback)
        probe = admission is _PROBE
        start = slot.clock() if slot.timed else 0.0
        try:
            result = await fn(*args, **kwargs)
        except BaseException as exc:
            if self._record_exception(exc, probe, start) is not _FAILURE:
                raise
            return await self._adegraded(exc, fallback)
        if self._classified_result(result, probe, start) is _FAILURE:
            return await self._adegraded(None, fallback, data=result, failed_result=True)
        return GuardedResult(result, False, self.state, None)

    # -- decorator and context managers ------------------------------------------------------

    @overload
    def __call__(self, fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]: ...
    @overload
    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]: ...
    def __call__(self, fn: Callable[P, Any]) -> Callable[P, Any]:
        """Decorate a function or coroutine function so every call goes through the breaker."""
        # The wrappers inline the closed fast path; the decorated function may itself take a
        # `fallback` argument, so they never route through call()'s keyword.
        slot = self._slot
        failed, settle = self._failed, self._settle
        if inspect.iscoroutinefunction(fn):
            afailed, asettle, acall_slow = self._afailed, self._asettle, self._acall_slow

            @functools.wraps(fn)
            async def async_wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
                if slot.fast:
                    try:
                        result = await fn(*args, **kwargs)
                    except BaseException as exc:
                        return await afailed(exc, False, 0.0, None)
                    if slot.dirty or self._result_check is not None:
                        return await asettle(result, False, 0.0, None)
                    slot.successes += 1
                    return result
                return await acall_slow(fn, args, kwargs, None)

            return async_wrapper
        call_slow = self._call_slow

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
            if slot.fast:
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:
                    return failed(exc, False, 0.0, None)
                if slot.dirty or self._result_check is not None:
                    return settle(result, False, 0.0, None)
                slot.successes += 1
                return result
            return call_slow(fn, args, kwargs, None)

        return wrapper

    def __enter__(self) -> CircuitBreaker:
        # On the closed fast path no Permit is built: None on the stack marks a fast entry.
        self._push(None if self._slot.fast else self.acquire())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._finish(exc)

    async def __aenter__(self) -> CircuitBreaker:
        self._push(None if self._slot.fast else await self.aacquire())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._finish(exc)

    def _push(self, permit: Permit | None) -> None:
        stack = self._entered.get(None)
        if stack is None:
            stack = []
            self._entered.set(stack)
        stack.append(permit)

    def _finish(self, exc: BaseException | None) -> None:
        permit = self._entered.get().pop()
        if permit is not None:
            permit.success() if exc is None else permit.failure(exc)
        elif exc is not None:
            self._record_exception(exc, False, 0.0)
        elif self._slot.dirty:
            self._slot.record(_SUCCESS, False, 0.0)
        else:
            self._slot.successes += 1

    # -- shared outcome handling -------------------------------------------------------------

    def _duration(self, start: float) -> float:
        return self._slot.clock() - start if self._slot.timed else 0.0

    def _record_exception(self, exc: BaseException, probe: bool, start: float) -> Outcome:
        try:
            outcome = self._classifier.exception(exc)
        except Exception:  # a broken predicate counts the call as failed, then surfaces
            self._slot.record(_FAILURE, probe, self._duration(start))
            raise
        self._slot.record(outcome, probe, self._duration(start))
        return outcome

    def _classified_result(self, result: object, probe: bool, start: float) -> Outcome:
        outcome = self._classifier.result(result) if self._result_check is not None else _SUCCESS
        self._slot.record(outcome, probe, self._duration(start))
        return outcome

    def _failed(
        self, exc: BaseException, probe: bool, start: float, fallback: Fallback | None
    ) -> Any:
        if self._record_exception(exc, probe, start) is _FAILURE and fallback is not None:
            return fallback(FallbackReason(self.name, self.state, exc))
        raise exc

    def _settle(self, result: Any, probe: bool, start: float, fallback: Fallback | None) -> Any:
        if self._classified_result(result, probe, start) is _FAILURE and fallback is not None:
            return fallback(FallbackReason(self.name, self.state, None))
        return result

    def _reject(self, fallback: Fallback | None) -> Any:
        self._slot.rejected()
        if fallback is None:
            raise self._open_error()
        return fallback(FallbackReason(self.name, self.state, None, self._slot.retry_after()))

    def _degraded(
        self,
        exc: BaseException | None,
        fallback: Fallback | None,
        data: Any = None,
        failed_result: bool = False,
    ) -> GuardedResult[Any]:
        reason = FallbackReason(self.name, self.state, exc, self._slot.retry_after())
        if fallback is not None:
            data = fallback(reason)
        text = f"upstream '{self.name}' returned a failed result" if failed_result else None
        return GuardedResult(data, True, self.state, text or reason.describe())

    async def _afailed(
        self, exc: BaseException, probe: bool, start: float, fallback: Fallback | None
    ) -> Any:
        return await _maybe_await(self._failed(exc, probe, start, fallback))

    async def _asettle(
        self, result: Any, probe: bool, start: float, fallback: Fallback | None
    ) -> Any:
        return await _maybe_await(self._settle(result, probe, start, fallback))

    async def _areject(self, fallback: Fallback | None) -> Any:
        return await _maybe_await(self._reject(fallback))

    async def _adegraded(
        self,
        exc: BaseException | None,
        fallback: Fallback | None,
        data: Any = None,
        failed_result: bool = False,
    ) -> GuardedResult[Any]:
        result = self._degraded(exc, fallback, data, failed_result)
        if inspect.isawaitable(result.data):
            return GuardedResult(await result.data, True, result.circuit_state, result.reason)
        return result


async def _maybe_await(value: Any) -> Any:
    """Async fallbacks may be coroutine functions; sync ones return plain values."""
    if inspect.isawaitable(value):
        return await value
    return value
