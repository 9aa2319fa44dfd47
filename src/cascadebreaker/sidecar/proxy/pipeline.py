"""The one call pipeline: every decision about a call through the sidecar, for both drivers.

A driver tells the pipeline what happened and carries out what it answers (like tenacity's
`iter()` and its sync and async loops). The HTTP exchange (exchange.py) does so callback by
callback; the async driver behind the gRPC `Call` (call.py) in a loop. So both behave alike:

    start(call)                -> None: admitted, send it | Rejection: answer it | ADMIT_LATER
    admit_later(call)          (awaitable) -> None | Rejection
    response(call, status, h)  -> False: deliver it | True: retry (call retry())
    upgraded(call, headers)       a WebSocket handshake was accepted (a success)
    failed(call, error)        -> REPLAY (same permit, fresh connection) | RETRY | FAIL
    retry(call)                -> as start(), after the hooks
    finish(call)                  the response is complete
    truncated(call)               the upstream failed after part of the response went out
    cancelled(call)               the client left; client_failed(call, outcome): its own fault

The pipeline runs the hooks (which may refuse or reroute; a lone `BareCallHook` settles most
outbound calls without a `RequestInfo`), takes the breaker's permit, counts
a retry budget, classifies responses, records outcomes, and keeps the route's stats, including
the latency of calls that end in an error. It does no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final, TypeVar

from cascadebreaker import CircuitOpenError, State
from cascadebreaker.sidecar.proxy.hooks import (
    BareCallHook,
    Direction,
    Rejection,
    RequestInfo,
    SettledCall,
)
from cascadebreaker.sidecar.proxy.refusals import find_refusal
from cascadebreaker.sidecar.proxy.replies import rejection_for_open_circuit
from cascadebreaker.sidecar.proxy.stats import LATENCY_BOUNDS
from cascadebreaker.sidecar.upstream.model import UpstreamError, UpstreamReset

if TYPE_CHECKING:
    from cascadebreaker import CircuitBreaker, Permit
    from cascadebreaker.core.fast_view import FastView
    from cascadebreaker.sidecar.http.wire import RawHeaders
    from cascadebreaker.sidecar.proxy.routes import Route
    from cascadebreaker.sidecar.proxy.runtime import SidecarRuntime


_C = TypeVar("_C")


def _unmarked(cls: _C) -> _C:
    return cls


try:  # compiled, `trait` makes CallState a mypyc trait (the decorator is not called then)
    from mypy_extensions import trait
except ImportError:  # not installed (it is no dependency of the library): interpreted, a no-op
    trait = _unmarked


__all__ = [
    "ADMIT_LATER",
    "CALL_SLOTS",
    "FAIL",
    "REPLAY",
    "RETRY",
    "AdmitLater",
    "Call",
    "CallPipeline",
    "CallState",
]


class AdmitLater:
    """The admission must be awaited (`CallPipeline.admit_later`)."""

    def __repr__(self) -> str:
        return "ADMIT_LATER"


ADMIT_LATER: Final = AdmitLater()

# What to do after an upstream error.
REPLAY: Final = 1  # a stale keep-alive connection: resend on a fresh one, unrecorded
RETRY: Final = 2  # recorded as a failure; admit again (`retry`) and send again
FAIL: Final = 3  # recorded; answer the error

# Methods a retry cannot make act twice (RFC 9110 §9.2.2).
IDEMPOTENT: Final = frozenset({b"GET", b"HEAD", b"OPTIONS", b"PUT", b"DELETE", b"TRACE"})
_MAX_REPLAYS: Final = 2
_OUTBOUND: Final = Direction.OUTBOUND  # a module constant: an enum member read is a Python call
_NO_SLOTS: Final[tuple[str, ...]] = ()


@trait
class CallState:
    """One call as the pipeline sees it: where it goes, its permit, its attempts.

    A driver's own per-call object carries these attributes (the HTTP exchange does, in its
    slots: a request allocates nothing more), or the driver uses `Call`. The call classes name
    it as a base: compiled, it is a mypyc trait, so the pipeline reads and writes these
    attributes natively (through a structural type, a Protocol, every access was a generic
    getattr, and every assignment a generic setattr even with the Protocol named as a base).
    `started_at` is the exception: mypyc 2.4 cannot emit the assignment of a float attribute
    through a trait (it fails building), so each call class sets it in `mark_started` (a
    native call; `setattr` was a generic one, ~200 instructions)."""

    __slots__ = _NO_SLOTS  # adds no instance dict (a name: mypy checks the subclasses' slots)

    direction: Direction
    route: Route  # the upstream; a hook may reroute it to an alternative
    method: bytes
    path: bytes  # as sent to the upstream, below its base path
    headers: RawHeaders  # end-to-end request headers; hooks may edit them
    client: str
    has_body: bool
    resendable: bool  # the driver can send the request again (no body, or one held whole)
    info: RequestInfo | None  # built only when hooks are registered and none settled the call
    settled: SettledCall | None  # what a lone `BareCallHook` settled the call with
    # An admission is held either as `admitted` (a closed breaker's lock-free path: the round,
    # with `breaker` and its slot's `view`; 0: none) or as a `permit` (every other path); never
    # both.
    admitted: int
    breaker: CircuitBreaker | None
    # The breaker's slot's `FastView`, kept with the round: `_record` needs it, and compiled
    # its fields are struct members (the interpreted slot's are generic look-ups).
    view: FastView | None
    permit: Permit | None
    attempt: int
    turn: int  # where round robin over the route's instances started this call
    started_at: float
    closed: bool  # answered, refused or abandoned: nothing more to record

    def mark_started(self, at: float) -> None:
        """`self.started_at = at`, written in each call class (see above)."""
        raise NotImplementedError


CALL_SLOTS = (
    "admitted",
    "attempt",
    "breaker",
    "client",
    "closed",
    "direction",
    "has_body",
    "headers",
    "info",
    "method",
    "path",
    "permit",
    "resendable",
    "route",
    "settled",
    "started_at",
    "turn",
    "view",
)


class Call(CallState):
    """A call of the async driver."""

    __slots__ = CALL_SLOTS

    def __init__(
        self,
        direction: Direction,
        route: Route,
        method: bytes,
        path: bytes,
        headers: RawHeaders,
        client: str,
        has_body: bool,
        resendable: bool,
    ) -> None:
        self.direction = direction
        self.route = route
        self.method = method
        self.path = path
        self.headers = headers
        self.client = client
        self.has_body = has_body
        self.resendable = resendable
        self.info: RequestInfo | None = None
        self.settled: SettledCall | None = None
        self.admitted = 0
        self.breaker: CircuitBreaker | None = None
        self.view: FastView | None = None
        self.permit: Permit | None = None
        self.attempt = 0
        self.turn = 0
        self.started_at = 0.0
        self.closed = False

    def mark_started(self, at: float) -> None:
        self.started_at = at


class CallPipeline:
    """Decides every step of every call of one runtime."""

    def __init__(self, runtime: SidecarRuntime) -> None:
        self.runtime = runtime
        self.hooks = runtime.hooks
        self.loop = runtime.loop
        # The loop's clock, bound once: a call of it is cheaper than a method call on the loop.
        self.clock: Callable[[], float] = runtime.loop.time

    # -- admission --------------------------------------------------------------------------
    def start(self, call: CallState) -> Rejection | AdmitLater | None:
        """Hooks (they may refuse or reroute), the retry budget's deposit, the breaker."""
        call.mark_started(self.clock())
        hooks = self.hooks
        registered = hooks.hooks  # the list: `HookChain.__bool__` is a Python call per request
        if registered:
            settled = None
            if len(registered) == 1:
                hook = registered[0]
                if isinstance(hook, BareCallHook):
                    if call.direction is _OUTBOUND:
                        settled = hooks.settle(
                            hook, call.route.name, call.method, call.path, call.headers
                        )
                    else:
                        settled = hooks.settle_inbound(
                            hook, call.method, call.path, call.headers, call.client
                        )
                    call.settled = settled
            if settled is None:  # every hook's `on_request`, with a `RequestInfo`
                runtime = self.runtime
                info = call.info = RequestInfo(
                    call.direction,
                    runtime.service,
                    call.route.name,
                    call.method,
                    call.path,
                    call.headers,
                    call.client,
                    runtime.route_resolver,
                )
                rejection = hooks.on_request(info)
                if rejection is not None:
                    return self.refuse(call, rejection)
                reroute = info.reroute
                if reroute is not None and reroute in runtime.routes:
                    call.route = runtime.routes[reroute]  # the primary's alternative
        route = call.route
        if len(route.pools) > 1:  # round robin (`Route.next_turn`; one instance: turn 0)
            call.turn = route.next_turn()
        if route.retry_attempts:
            route.budget.deposit()
        return self._admit(call)

    def retry(self, call: CallState) -> Rejection | AdmitLater | None:
        """Another attempt after a failure: the breaker is asked again."""
        call.attempt += 1
        return self._admit(call)

    def _admit(self, call: CallState) -> Rejection | AdmitLater | None:
        route = call.route
        breaker = route.breaker
        if breaker is None:
            return None
        endpoints = route.endpoints
        if endpoints is None:
            view = route.view  # the route's breaker's, found once
        else:
            breaker = endpoints.breaker_for(call.method, call.path)
            view = breaker._slot.view
        assert view is not None
        # `CircuitBreaker.acquire`'s closed path, inlined without its Permit (as the breaker's
        # own `call` does): the round is all a success needs (`_record`). No store, shared or
        # not, is asked on this path; a Redis slot counts these successes for the fleet.
        round_ = view.fast
        if round_ is not None:
            call.breaker = breaker
            call.view = view
            call.admitted = round_
            return None
        if route.shared_store and breaker.state is not State.CLOSED:
            return ADMIT_LATER  # off the closed path a shared store may ask Redis
        try:
            call.permit = breaker.acquire()
        except CircuitOpenError as exc:
            key = self.runtime.refusal_key
            return self.refuse(call, rejection_for_open_circuit(route.name, exc, key))
        return None

    async def admit_later(self, call: CallState) -> Rejection | None:
        """The admission that may wait for a shared store (never blocking the event loop).

        A call abandoned meanwhile gets nothing: its permit is given back unrecorded."""
        breaker = call.route.breaker_for(call.method, call.path)
        assert breaker is not None
        try:
            permit = await breaker.aacquire()
        except CircuitOpenError as exc:
            if call.closed:
                return None
            return self.refuse(
                call, rejection_for_open_circuit(call.route.name, exc, self.runtime.refusal_key)
            )
        if call.closed:
            permit.ignore()
            return None
        call.permit = permit
        return None

    def refuse(self, call: CallState, rejection: Rejection) -> Rejection:
        """The call is answered with `rejection` (an open circuit, a hook's refusal)."""
        call.closed = True
        call.route.stats.count("rejected")
        self._tell(call, rejection.status, "rejected", None)
        return rejection

    # -- outcomes ---------------------------------------------------------------------------
    def response(self, call: CallState, status: int, headers: RawHeaders) -> bool:
        """A response head arrived: classify and record it; True when it should be retried.

        Hooks hear the outcome and may edit `headers` (the end-to-end response headers)."""
        route = call.route
        if status == 503 and self._refused_by_instance(call, headers):
            # That instance's sidecar refused (its endpoint is unavailable there): not a
            # failure of the upstream; the next instance gets the call, with a fresh permit.
            route.stats.count("instance_refused")
            self._drop_permit(call)
            return True
        failed = status < 600 and route.failure_table[status]  # `Route.is_failure`, inlined
        if failed and status == 503 and self._refused_upstream(call, headers):
            return False
        if failed and status in route.retry_statuses and self._may_retry(call):
            self._record(call, False, None, "failure_status")
            return True
        self._record(call, not failed, None, "failure_status" if failed else "success")
        info = call.info
        if info is not None:  # `_tell`, inlined: it runs once per call
            info.response_headers = headers
            self.hooks.on_response(info, status, "failure" if failed else "success")
        else:
            settled = call.settled
            if settled is not None:
                self.hooks.settled_response(
                    route.name, settled, status, "failure" if failed else "success", headers
                )
        return False

    def upgraded(self, call: CallState, headers: RawHeaders) -> None:
        """The upstream accepted a WebSocket handshake (101): a success."""
        self._record(call, True, None, "success")
        call.closed = True
        self._tell(call, 101, "success", headers)

    def failed(self, call: CallState, error: UpstreamError) -> int:
        """The upstream failed before a complete response: REPLAY, RETRY or FAIL."""
        if (
            isinstance(error, UpstreamReset)
            and error.reused
            and not error.response_started
            and call.resendable
            and call.attempt < _MAX_REPLAYS
        ):
            # A keep-alive connection the upstream had closed: not the upstream's failure.
            call.attempt += 1
            return REPLAY
        self._record(call, False, error, error.kind)
        if self._may_retry(call):
            return RETRY
        call.closed = True
        self._tell(call, error.status, "failure", None)
        self._observe(call)
        return FAIL

    def finish(self, call: CallState) -> None:
        """The whole response reached the client."""
        call.closed = True
        # `RouteStats.observe`, inlined: it runs once per call.
        seconds = self.clock() - call.started_at
        stats = call.route.stats
        # `bisect_left(LATENCY_BOUNDS, seconds)` as a loop: most calls end in the first buckets,
        # found in a comparison or two of floats (compiled, native ones; bisect_left is a
        # generic call comparing float objects, ~750 instructions).
        bucket = 0
        for bound in LATENCY_BOUNDS:
            if seconds <= bound:
                break
            bucket += 1
        stats.latency_buckets[bucket] += 1
        stats.latency_sum += seconds
        stats.latency_count += 1

    def truncated(self, call: CallState) -> None:
        """The upstream failed after part of the response reached the client (it is cut):
        counted as `reset`; the outcome recorded at the head stands."""
        call.closed = True
        call.route.stats.count("reset")

    def cancelled(self, call: CallState) -> None:
        """The client left before its response was complete: give the permit back."""
        call.closed = True
        if self._drop_permit(call):
            call.route.stats.count("cancelled")

    def client_failed(self, call: CallState, outcome: str) -> None:
        """The client stalled (`client_timeout`) or sent a malformed body (`bad_request`):
        the breaker hears nothing (the permit is given back unrecorded)."""
        call.closed = True
        self._drop_permit(call)
        call.route.stats.count(outcome)

    # -- internals --------------------------------------------------------------------------
    def _may_retry(self, call: CallState) -> bool:
        """Retries are for idempotent requests without a body, within the retry budget.

        The drivers ask only before any response byte reached the client."""
        route = call.route
        return (
            call.attempt < route.retry_attempts
            and not call.has_body
            and call.method in IDEMPOTENT  # a retried POST could act twice
            and route.budget.withdraw()
        )

    def _refused_by_instance(self, call: CallState, headers: RawHeaders) -> bool:
        """A refusal by one instance's own sidecar (a trusted `ccb-refusal`): nothing was done, so
        any request the driver can send again goes to the next instance, once per instance,
        within the retry budget."""
        route = call.route
        return (
            len(route.pools) > 1
            and call.resendable
            and call.attempt + 1 < len(route.pools)
            and self._trusted_refusal(call, headers)
            and route.budget.withdraw()
        )

    def _record(
        self, call: CallState, success: bool, error: Exception | None, outcome: str
    ) -> None:
        # `RouteStats.count`, inlined (it runs once per call); `success` is True exactly when
        # the outcome is `success`
        stats = call.route.stats
        if success:
            stats.successes += 1
        else:
            stats.others[outcome] += 1
        round_ = call.admitted
        if round_:
            call.admitted = 0
            breaker = call.breaker
            view = call.view
            assert breaker is not None and view is not None
            if success and view.fast == round_:
                view.successes += 1  # `Permit.success`'s lock-free path, inlined
                return
            permit: Permit | None = breaker._fast_permit(round_)  # the rare outcomes
        else:
            permit = call.permit
            call.permit = None
        if permit is not None:
            if success:
                permit.success()
            else:
                permit.failure(error)

    def _trusted_refusal(self, call: CallState, headers: RawHeaders) -> bool:
        """The 503 carries a sidecar's refusal mark that we trust (a plain `ccb-cause` does not
        count: any app could send one and hide its failures from the breaker)."""
        value = find_refusal(headers)
        return value is not None and self.runtime.refusal_trust(call.route, _state(call), value)

    def _refused_upstream(self, call: CallState, headers: RawHeaders) -> bool:
        """A 503 marked as a sidecar's refusal we trust: not the upstream's failure (the
        cascade carries the cause); the permit goes back unrecorded and it is not retried."""
        value = find_refusal(headers)
        if value is None or not self.runtime.refusal_trust(call.route, _state(call), value):
            return False
        self._drop_permit(call)
        call.route.stats.count("refused_upstream")
        self._tell(call, 503, "refused", headers)
        return True

    def _tell(self, call: CallState, status: int, outcome: str, headers: RawHeaders | None) -> None:
        """The hooks hear the call's outcome (`headers`: the response's, when it has one)."""
        info = call.info
        if info is not None:
            if headers is not None:
                info.response_headers = headers
            self.hooks.on_response(info, status, outcome)
            return
        settled = call.settled
        if settled is not None:
            self.hooks.settled_response(
                call.route.name, settled, status, outcome, [] if headers is None else headers
            )

    def _drop_permit(self, call: CallState) -> bool:
        """Give the call's admission back unrecorded; False when it held none."""
        round_ = call.admitted
        if round_:
            call.admitted = 0
            breaker = call.breaker
            assert breaker is not None
            breaker._fast_permit(round_).ignore()
            return True
        permit = call.permit
        if permit is None:
            return False
        call.permit = None
        permit.ignore()
        return True

    def _observe(self, call: CallState) -> None:
        call.route.stats.observe(self.clock() - call.started_at)


def _state(call: CallState) -> object:
    """What the hooks keep about the call (`RequestInfo.state`, or what settled it)."""
    info = call.info
    return info.state if info is not None else call.settled
