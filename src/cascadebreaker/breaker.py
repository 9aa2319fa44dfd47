"""CircuitBreaker: the public facade. Thin sync and async drivers around a store's slot."""

from __future__ import annotations

import functools
import inspect
import logging
import math
import random
import sys
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from types import FrameType, TracebackType
from typing import Any, ParamSpec, TypeVar, overload

from .blocks import (
    CONTEXTLIB_GLOBALS,
    MAX_OPEN_BLOCKS,
    Blocks,
    Entry,
    Nested,
    find_entered_elsewhere,
    forget_oldest,
    user_frame,
)
from .core.classify import Classifier, ExceptionPredicate, ResultPredicate
from .core.config import BreakerConfig, build_policies, check_settings
from .core.policies import Backoff, FixedBackoff, TripPolicy
from .core.state import Admission, Outcome, Reason, State
from .degraded import FallbackReason, GuardedResult
from .errors import CircuitOpenError
from .events import OutcomeListener, TransitionListener
from .logs import TransitionLogger
from .permit import Permit
from .snapshot import BreakerSnapshot
from .stores.base import BreakerSlot, Clock, Store
from .stores.memory import MemoryStore

P = ParamSpec("P")
R = TypeVar("R")
Fallback = Callable[[FallbackReason], Any]
log = logging.getLogger("cascadebreaker")
_getframe = sys._getframe  # with-blocks are kept by their frame (blocks.py)

_REJECT = Admission.REJECT
_PROBE = Admission.PROBE
_SUCCESS = Outcome.SUCCESS
_FAILURE = Outcome.FAILURE

# Every breaker alive in this process, for `cascadebreaker.testing` (reset between tests).
# Touched once per construction, never on the call path.
_live: weakref.WeakSet[CircuitBreaker] = weakref.WeakSet()


def live_breakers() -> list[CircuitBreaker]:
    """The breakers this process holds right now (what test isolation resets)."""
    return list(_live)


class CircuitBreaker:
    """A circuit breaker around calls to one upstream.

    Calls go through `call` / `acall`, the decorator form (`@b` or `@b.protect(fallback=...)`),
    `with` / `async with`, `guard` / `aguard` (degraded result, never raises for upstream
    failures) or `acquire` (a permit for code that records the outcome itself, such as a proxy).
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
        probe_timeout: float | None = None,
        half_open_failure_rate: float | None = None,
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
        # Before the constructor: compiled, it would refuse a wrong type with a bare TypeError.
        check_settings(
            half_open_max_calls,
            success_threshold,
            max_half_open_time,
            probe_timeout,
            half_open_failure_rate,
        )
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
            probe_timeout=probe_timeout,
            half_open_failure_rate=half_open_failure_rate,
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
        self._blocks: Blocks = {}
        self._warned_unmatched = False
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

    def snapshot(self) -> BreakerSnapshot:
        """State, reason, counters, windows and probes now (read-only; `to_dict()` for JSON)."""
        return self._slot.snapshot()

    def __repr__(self) -> str:
        return f"<CircuitBreaker {self.name!r} {self.state.value}>"

    # -- permits ---------------------------------------------------------------------------

    def acquire(self) -> Permit:
        """Admit one call or raise CircuitOpenError; record the outcome on the permit."""
        round_ = self._slot.fast
        if round_ is not None:  # `_fast_permit`, inlined: the closed path of every call
            return Permit(self._slot, self._classifier, False, 0.0, round_, 0)
        return self._permit(*self._slot.admit())

    async def aacquire(self) -> Permit:
        """Async twin of `acquire` (shared stores may ask their server off the closed path)."""
        round_ = self._slot.fast
        if round_ is not None:
            return self._fast_permit(round_)
        return self._permit(*await self._slot.aadmit())

    def _fast_permit(self, round_: int) -> Permit:
        return Permit(self._slot, self._classifier, False, 0.0, round_, 0)

    def _permit(self, admission: Admission, round_: int, ticket: int) -> Permit:
        if admission is _REJECT:
            self._slot.rejected()
            raise self._open_error()
        slot = self._slot
        start = slot.clock() if slot.timed else 0.0
        return Permit(slot, self._classifier, admission is _PROBE, start, round_, ticket)

    def _admitted(self, admission: Admission, round_: int, ticket: int) -> Permit | None:
        """A permit for an admitted call, None for a rejected one (not counted yet)."""
        if admission is _REJECT:
            return None
        slot = self._slot
        start = slot.clock() if slot.timed else 0.0
        return Permit(slot, self._classifier, admission is _PROBE, start, round_, ticket)

    def _open_error(self) -> CircuitOpenError:
        slot = self._slot
        m = slot.machine
        return CircuitOpenError(
            self.name,
            m.visible_state,
            slot.retry_after(),
            m.refusal,
            slot.last_failure,
            slot.scope,
            m.detail,
        )

    # -- sync calls --------------------------------------------------------------------------

    def call(
        self, fn: Callable[..., R], /, *args: Any, fallback: Fallback | None = None, **kwargs: Any
    ) -> R:
        """Run `fn(*args, **kwargs)` through the breaker."""
        slot = self._slot
        round_ = slot.fast
        if round_ is not None:
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                return self._failed(exc, self._fast_permit(round_), fallback)  # type: ignore[no-any-return]
            if slot.dirty or self._result_check is not None:
                return self._settle(result, self._fast_permit(round_), fallback)  # type: ignore[no-any-return]
            slot.successes += 1
            return result
        return self._call_slow(fn, args, kwargs, fallback)  # type: ignore[no-any-return]

    def _call_slow(
        self, fn: Callable[..., Any], args: Any, kwargs: Any, fallback: Fallback | None
    ) -> Any:
        permit = self._admitted(*self._slot.admit())
        if permit is None:
            return self._reject(fallback)
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            return self._failed(exc, permit, fallback)
        return self._settle(result, permit, fallback)

    def guard(
        self, fn: Callable[..., R], /, *args: Any, fallback: Fallback | None = None, **kwargs: Any
    ) -> GuardedResult[R]:
        """Run `fn` and return a GuardedResult; upstream failures become degraded results."""
        slot = self._slot
        round_ = slot.fast
        if round_ is not None:
            permit: Permit | None = self._fast_permit(round_)
        else:
            permit = self._admitted(*slot.admit())
        if permit is None:
            slot.rejected()
            return self._degraded(None, fallback)
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            if permit.settle_exception(exc) is not _FAILURE:
                raise
            return self._degraded(exc, fallback, ran=True)
        if permit.settle_result(result) is _FAILURE:
            return self._degraded(None, fallback, data=result, ran=True)
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
        round_ = slot.fast
        if round_ is not None:
            try:
                result = await fn(*args, **kwargs)
            except BaseException as exc:
                return await self._afailed(exc, self._fast_permit(round_), fallback)  # type: ignore[no-any-return]
            if slot.dirty or self._result_check is not None:
                return await self._asettle(result, self._fast_permit(round_), fallback)  # type: ignore[no-any-return]
            slot.successes += 1
            return result
        return await self._acall_slow(fn, args, kwargs, fallback)  # type: ignore[no-any-return]

    async def _acall_slow(
        self, fn: Callable[..., Awaitable[Any]], args: Any, kwargs: Any, fallback: Fallback | None
    ) -> Any:
        permit = self._admitted(*await self._slot.aadmit())
        if permit is None:
            return await self._areject(fallback)
        try:
            result = await fn(*args, **kwargs)
        except BaseException as exc:
            return await self._afailed(exc, permit, fallback)
        return await self._asettle(result, permit, fallback)

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
        round_ = slot.fast
        if round_ is not None:
            permit: Permit | None = self._fast_permit(round_)
        else:
            permit = self._admitted(*await slot.aadmit())
        if permit is None:
            slot.rejected()
            return await self._adegraded(None, fallback)
        try:
            result = await fn(*args, **kwargs)
        except BaseException as exc:
            if permit.settle_exception(exc) is not _FAILURE:
                raise
            return await self._adegraded(exc, fallback, ran=True)
        if permit.settle_result(result) is _FAILURE:
            return await self._adegraded(None, fallback, data=result, ran=True)
        return GuardedResult(result, False, self.state, None)

    # -- decorator -------------------------------------------------------------------------

    @overload
    def __call__(self, fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]: ...
    @overload
    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]: ...
    def __call__(self, fn: Callable[P, Any]) -> Callable[P, Any]:
        """Decorate a function or coroutine function so every call goes through the breaker."""
        return self._wrap(fn, None)

    @overload
    def protect(self, fn: Callable[P, R], /) -> Callable[P, R]: ...
    @overload
    def protect(
        self, fn: None = None, /, *, fallback: Fallback | None = None
    ) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
    def protect(self, fn: Any = None, /, *, fallback: Fallback | None = None) -> Any:
        """Decorator with options: `@b.protect(fallback=f)` returns `f(FallbackReason)` (awaited
        when it is a coroutine function and the decorated function is async) instead of raising
        when the call is rejected or fails. `@b.protect` alone is `@b`."""
        if fn is not None:
            return self._wrap(fn, fallback)
        return lambda f: self._wrap(f, fallback)

    def _wrap(self, fn: Callable[P, Any], fallback: Fallback | None) -> Callable[P, Any]:
        # The wrappers inline the closed fast path with as few closure variables as possible
        # (each costs a copy on every call); the decorated function may itself take a
        # `fallback` argument, so they never route through call()'s keyword.
        slot = self._slot
        checked = self._result_check is not None
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
                round_ = slot.fast
                if round_ is not None:
                    try:
                        result = await fn(*args, **kwargs)
                    except BaseException as exc:
                        return await self._afailed(exc, self._fast_permit(round_), fallback)
                    if slot.dirty or checked:
                        return await self._asettle(result, self._fast_permit(round_), fallback)
                    slot.successes += 1
                    return result
                return await self._acall_slow(fn, args, kwargs, fallback)

            return async_wrapper

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
            round_ = slot.fast
            if round_ is not None:
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:
                    return self._failed(exc, self._fast_permit(round_), fallback)
                if slot.dirty or checked:
                    return self._settle(result, self._fast_permit(round_), fallback)
                slot.successes += 1
                return result
            return self._call_slow(fn, args, kwargs, fallback)

        return wrapper

    # -- context managers: each block settles the permit it acquired (see blocks.py) --------

    def __enter__(self) -> CircuitBreaker:
        # The block's entry is kept by the frame running the with statement (blocks.py). On
        # the closed fast path no Permit is built: the block keeps just its round. Inlined
        # `_open_block`: this is the hot path of every sync block.
        round_ = self._slot.fast
        entry = round_ if round_ is not None else self.acquire()
        frame = _getframe(1)
        blocks = self._blocks
        below = blocks.get(frame)
        blocks[frame] = entry if below is None else Nested(entry, below)
        if len(blocks) > MAX_OPEN_BLOCKS:
            forget_oldest(blocks)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # The start of `_close_block`, inlined for the common case: a block on the lock-free
        # path that ends well in the frame that opened it.
        frame = _getframe(1)
        entry = self._blocks.pop(frame, None)
        slot = self._slot
        if entry.__class__ is int and exc is None and entry == slot.fast:
            slot.successes += 1
            return
        self._close_block(frame, exc, entry)

    async def __aenter__(self) -> CircuitBreaker:
        frame = _getframe(1)  # before any await: the frame running `async with`
        round_ = self._slot.fast
        self._open_block(frame, round_ if round_ is not None else await self.aacquire())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        frame = _getframe(1)
        self._close_block(frame, exc, self._blocks.pop(frame, None))

    def _open_block(self, frame: FrameType, entry: Entry) -> None:
        """Keep `entry` as the innermost block of `frame` (the with statement's frame)."""
        # A coroutine forgets who awaited it once it returns: an async exit stack's entry is
        # kept by the frame using the stack (for sync stacks, see find_entered_elsewhere).
        if frame.f_globals is CONTEXTLIB_GLOBALS:
            frame = user_frame(frame) or frame
        blocks = self._blocks
        below = blocks.get(frame)
        blocks[frame] = entry if below is None else Nested(entry, below)
        if len(blocks) > MAX_OPEN_BLOCKS:
            forget_oldest(blocks)

    def _close_block(
        self, frame: FrameType, exc: BaseException | None, entry: Entry | Nested | None
    ) -> None:
        """Settle the entry popped for `frame` (None: not opened by it)."""
        slot = self._slot
        if entry.__class__ is int and exc is None and entry == slot.fast:
            slot.successes += 1  # the lock-free path: nothing to reset
            return
        if entry is None:
            entry = find_entered_elsewhere(self._blocks, frame)
            if entry is None:
                self._unmatched_exit()
                entry = Permit(self._slot, self._classifier, False, 0.0)  # the current round
        if isinstance(entry, Nested):
            self._blocks[frame] = entry.below
            entry = entry.entry
        self._settle_block(entry, exc)

    def _settle_block(self, entry: Entry, exc: BaseException | None) -> None:
        if not isinstance(entry, Permit):
            slot = self._slot
            if exc is None and slot.fast == entry:
                slot.successes += 1  # the lock-free path: nothing to reset
                return
            entry = self._fast_permit(entry)
        if exc is None:
            entry.success()
        else:
            entry.settle_exception(exc)

    def _unmatched_exit(self) -> None:
        if not self._warned_unmatched:
            self._warned_unmatched = True
            log.warning(
                "breaker %r: a `with` block exited in another function than it entered; its "
                "outcome counts for the current round (hold a permit from acquire() instead)",
                self.name,
            )

    # -- shared outcome handling -------------------------------------------------------------

    def _fallback_reason(self, exc: BaseException | None, ran: bool) -> FallbackReason:
        slot = self._slot
        m = slot.machine
        return FallbackReason(
            self.name,
            m.visible_state,
            exc,
            slot.retry_after(),
            Reason.CALL_FAILED if ran else m.refusal,
            slot.last_failure,
            slot.scope,
        )

    def _failed(self, exc: BaseException, permit: Permit, fallback: Fallback | None) -> Any:
        if permit.settle_exception(exc) is _FAILURE and fallback is not None:
            return fallback(self._fallback_reason(exc, ran=True))
        raise exc

    def _settle(self, result: Any, permit: Permit, fallback: Fallback | None) -> Any:
        if permit.settle_result(result) is _FAILURE and fallback is not None:
            return fallback(self._fallback_reason(None, ran=True))
        return result

    def _reject(self, fallback: Fallback | None) -> Any:
        self._slot.rejected()
        if fallback is None:
            raise self._open_error()
        return fallback(self._fallback_reason(None, ran=False))

    def _degraded(
        self,
        exc: BaseException | None,
        fallback: Fallback | None,
        data: Any = None,
        ran: bool = False,
    ) -> GuardedResult[Any]:
        reason = self._fallback_reason(exc, ran)
        if fallback is not None:
            data = fallback(reason)
        retry = None if math.isinf(reason.retry_after) else reason.retry_after
        return GuardedResult.degraded(data, self.state, reason, retry)

    async def _afailed(self, exc: BaseException, permit: Permit, fallback: Fallback | None) -> Any:
        return await _maybe_await(self._failed(exc, permit, fallback))

    async def _asettle(self, result: Any, permit: Permit, fallback: Fallback | None) -> Any:
        return await _maybe_await(self._settle(result, permit, fallback))

    async def _areject(self, fallback: Fallback | None) -> Any:
        return await _maybe_await(self._reject(fallback))

    async def _adegraded(
        self,
        exc: BaseException | None,
        fallback: Fallback | None,
        data: Any = None,
        ran: bool = False,
    ) -> GuardedResult[Any]:
        result = self._degraded(exc, fallback, data, ran)
        if inspect.isawaitable(result.data):
            return GuardedResult(
                await result.data,
                True,
                result.circuit_state,
                result.reason,
                result.retry_after,
                result.reason_code,
                result.code,
            )
        return result


async def _maybe_await(value: Any) -> Any:
    """Async fallbacks may be coroutine functions; sync ones return plain values."""
    if inspect.isawaitable(value):
        return await value
    return value
