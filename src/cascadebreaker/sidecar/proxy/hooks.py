"""Plug points: hooks the sidecar calls for every inbound and outbound request.

The cascade plugs in here: it sees which endpoint a request serves (or targets), may add headers
to the forwarded request, may refuse it with a `Rejection` (503 + JSON), and hears the outcome.
With no hook registered the proxy builds no `RequestInfo` at all (the hot path stays lean); a
lone `BareCallHook` settles most calls without one (`BareCallHook.settle`, `settle_inbound`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from enum import StrEnum
from typing import Any, Final, Protocol, TypeVar

from cascadebreaker.sidecar.http.wire import RawHeaders, json_response
from cascadebreaker.sidecar.logs import RateLimitedLog
from cascadebreaker.sidecar.proxy.endpoint_hint import route_template

_C = TypeVar("_C")


def _no_attrs(*attrs: str, **flags: object) -> Callable[[_C], _C]:
    return lambda cls: cls


try:  # compiled, mypyc reads the decorator: hooks written in Python may subclass the classes
    from mypy_extensions import mypyc_attr
except ImportError:  # not installed (it is no dependency of the library): interpreted, a no-op
    mypyc_attr = _no_attrs

log = logging.getLogger("cascadebreaker.sidecar")
_hook_errors: Final = RateLimitedLog(log, logging.ERROR)  # a hook's bug may fire on every request

# A sidecar's refusal names its cause chain in this header (for people and apps; a caller's
# sidecar trusts only the sealed `ccb-refusal` mark, proxy/refusals.py).
CAUSE_HEADER: Final = "ccb-cause"


RouteResolver = Callable[[str, str, str], str]
"""(service, method, path) -> route template, e.g. `/v1/charges/{id}`."""


def default_route_resolver(service: str, method: str, path: str) -> str:
    """Fold id-like segments (the stand-in until the cascade's resolver is plugged in)."""
    return route_template(path)


class Direction(StrEnum):
    """Which listener a request came through."""

    OUTBOUND = "outbound"  # the local app calling an upstream
    INBOUND = "inbound"  # a caller reaching the local app


class Rejection:
    """Refuse a request instead of forwarding it: `status` + `retry-after` + a JSON body.

    `refusal` is the `ccb-refusal` mark (refusals.py) of the sidecar's own refusals: a calling
    sidecar does not count them as failures."""

    __slots__ = ("body", "refusal", "retry_after", "status")

    def __init__(
        self,
        body: dict[str, Any],
        status: int = 503,
        retry_after: float | None = None,
        refusal: bytes | None = None,
    ) -> None:
        self.body = body
        self.status = status
        self.retry_after = retry_after
        self.refusal = refusal

    def headers(self) -> list[tuple[bytes, bytes]]:
        """The headers of the reply besides the JSON ones (`retry-after`, `ccb-refusal`)."""
        extra: list[tuple[bytes, bytes]] = []
        if self.refusal is not None:
            extra.append((b"ccb-refusal", self.refusal))
        if self.retry_after is not None:
            # retry-after takes whole seconds; never 0 for an open circuit.
            extra.append((b"retry-after", b"%d" % max(1, math.ceil(self.retry_after))))
        return extra

    def to_bytes(self, close: bool = False) -> bytes:
        """The complete HTTP response."""
        return json_response(self.status, self.body, self.headers(), close=close)


class RequestInfo:
    """What a hook knows about one request."""

    __slots__ = (
        "_method",
        "_path",
        "_route",
        "_route_resolver",
        "add_headers",
        "client",
        "direction",
        "headers",
        "raw_method",
        "raw_path",
        "reroute",
        "response_headers",
        "service",
        "state",
        "target",
    )

    def __init__(
        self,
        direction: Direction,
        service: str,
        target: str,
        method: bytes,
        path: bytes,
        headers: RawHeaders,
        client: str,
        route_resolver: RouteResolver,
    ) -> None:
        self.direction = direction
        self.service = service  # this sidecar's service
        self.target = target  # the upstream (outbound) or this service (inbound)
        # As on the wire; `method` and `path` decode them on first use (most requests are
        # decided on the bytes: a memo of the call line compares them).
        self.raw_method = method
        self.raw_path = path  # as sent to the target, query included
        self._method: str | None = None
        self._path: str | None = None
        self.headers = headers  # end-to-end request headers (raw bytes, original case)
        self.client = client  # peer address of the downstream connection
        self.add_headers: RawHeaders = []  # hooks append headers to forward with the request
        # Set by on_request: forward to this upstream instead of `target` (an alternative).
        self.reroute: str | None = None
        # The upstream's response headers when on_response runs; hooks may append to them.
        self.response_headers: RawHeaders = []
        self.state: Any = None  # a hook's own per-request state (e.g. a trace key)
        self._route_resolver = route_resolver
        self._route: str | None = None

    @property
    def method(self) -> str:
        """The request method (decoded once, on first use)."""
        if self._method is None:
            self._method = self.raw_method.decode()
        return self._method

    @property
    def path(self) -> str:
        """The path as sent to the target, query included (decoded as latin-1 once)."""
        if self._path is None:
            self._path = self.raw_path.decode("latin-1")
        return self._path

    @property
    def route(self) -> str:
        """The route template of the target endpoint (computed once, on first use)."""
        if self._route is None:
            self._route = self._route_resolver(self.target, self.method, self.path)
        return self._route

    @property
    def endpoint(self) -> str:
        """`METHOD /route/{id}`: the endpoint of `target` this request is served by."""
        return f"{self.method} {self.route}"

    def header(self, name: str) -> str | None:
        """The first value of a request header (case-insensitive), decoded as latin-1."""
        key = name.lower().encode("latin-1")
        for raw_name, value in self.headers:
            if raw_name.lower() == key:
                return value.decode("latin-1")
        return None


class RequestHook(Protocol):
    """Called on the event loop for every proxied request; must be quick and never block."""

    def on_request(self, info: RequestInfo) -> Rejection | None:
        """Before forwarding (after the upstream is resolved, before its breaker): None = go."""

    def on_response(self, info: RequestInfo, status: int, outcome: str) -> None:
        """After the response head (or the error reply); outcome: success, failure,
        rejected (by us), refused (by the upstream's sidecar: `ccb-refusal`)."""


@mypyc_attr(allow_interpreted_subclasses=True)
class SettledCall:
    """A call a `BareCallHook` settled without a `RequestInfo`: the header lines to forward
    with it (ready bytes, `name: value\r\n` each) and the hook that hears its outcome. Hooks
    subclass it to keep their own state for the call."""

    __slots__ = ("hook", "lines")

    def __init__(self, hook: BareCallHook, lines: bytes = b"") -> None:
        self.hook = hook
        self.lines = lines


@mypyc_attr(allow_interpreted_subclasses=True)
class BareCallHook:
    """A `RequestHook` (a subclass writes `on_request` and `on_response` too) that settles the
    common call from what it remembers of the call line, with no `RequestInfo` built and no
    hook chain run: when it is the only hook registered the pipeline asks `settle` (outbound)
    or `settle_inbound` first, and `on_request` only for the calls it leaves (most meshes'
    calls carry nothing for a hook to read, refuse or reroute). A settled call's outcome goes
    to `settled_response`, never to `on_response`. Hooks written in Python may subclass it
    (and `SettledCall`), also when the sidecar runs compiled."""

    def settle(
        self, upstream: str, method: bytes, path: bytes, headers: RawHeaders
    ) -> SettledCall | None:
        """Let the outbound call go (what to forward with it) or None: build a `RequestInfo`
        and run `on_request` (a header to read, a refusal to explain, an alternative to
        weigh). This base settles none."""
        return None

    def settle_inbound(
        self, method: bytes, path: bytes, headers: RawHeaders, client: str
    ) -> SettledCall | None:
        """`settle` for a call reaching the local app from `client` (the peer's address). It
        may remove headers from `headers` in place (they are forwarded to the app), but only
        when it settles the call: None leaves them as they came, for `on_request`. This base
        settles none."""
        return None

    def settled_response(
        self, upstream: str, settled: SettledCall, status: int, outcome: str, headers: RawHeaders
    ) -> None:
        """`on_response` for a settled call; `headers` are the response's (editable). A hook
        that settles calls writes it; this base hears nothing (it settles none)."""


class HookChain:
    """The registered hooks, run in order; a hook that raises is logged and skipped."""

    def __init__(self) -> None:
        self.hooks: list[RequestHook] = []

    def __bool__(self) -> bool:
        return bool(self.hooks)

    def add(self, hook: RequestHook) -> None:
        """Register a hook."""
        self.hooks.append(hook)

    def remove(self, hook: RequestHook) -> None:
        """Unregister a hook."""
        self.hooks.remove(hook)

    def on_request(self, info: RequestInfo) -> Rejection | None:
        """First rejection wins."""
        for hook in self.hooks:
            try:
                rejection = hook.on_request(info)
            except Exception:
                _hook_errors("request hook %r failed; request let through", hook, exc_info=True)
                continue
            if rejection is not None:
                return rejection
        return None

    def on_response(self, info: RequestInfo, status: int, outcome: str) -> None:
        """Tell every hook."""
        for hook in self.hooks:
            try:
                hook.on_response(info, status, outcome)
            except Exception:
                _hook_errors("response hook %r failed", hook, exc_info=True)

    def settle(
        self, hook: BareCallHook, upstream: str, method: bytes, path: bytes, headers: RawHeaders
    ) -> SettledCall | None:
        """`hook.settle`; one that raises settles nothing (`on_request` runs instead)."""
        try:
            return hook.settle(upstream, method, path, headers)
        except Exception:
            _hook_errors("request hook %r failed to settle a call", hook, exc_info=True)
            return None

    def settle_inbound(
        self, hook: BareCallHook, method: bytes, path: bytes, headers: RawHeaders, client: str
    ) -> SettledCall | None:
        """`hook.settle_inbound`; one that raises settles nothing (`on_request` runs instead)."""
        try:
            return hook.settle_inbound(method, path, headers, client)
        except Exception:
            _hook_errors("request hook %r failed to settle a call", hook, exc_info=True)
            return None

    @staticmethod
    def settled_response(
        upstream: str, settled: SettledCall, status: int, outcome: str, headers: RawHeaders
    ) -> None:
        """Tell the hook that settled the call."""
        hook = settled.hook
        try:
            hook.settled_response(upstream, settled, status, outcome, headers)
        except Exception:
            _hook_errors("response hook %r failed", hook, exc_info=True)
