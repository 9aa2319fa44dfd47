"""Request handlers of the outbound and inbound listeners: which route, which path."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, TypeVar

from cascadebreaker.sidecar.http.connection import ServerConnection
from cascadebreaker.sidecar.http.exchange import Exchange, RequestHandler, RequestHead
from cascadebreaker.sidecar.http.wire import COMPILED, error_response
from cascadebreaker.sidecar.proxy.exchange import ProxyExchange
from cascadebreaker.sidecar.proxy.hooks import Direction
from cascadebreaker.sidecar.proxy.replies import FixedExchange
from cascadebreaker.sidecar.proxy.routes import Route
from cascadebreaker.sidecar.proxy.runtime import SidecarRuntime

_HOST_NAMES: Final[dict[bytes, bytes]] = {}
# The last Host header resolved, and its name: most requests carry the last one's Host, and
# comparing it is far cheaper than hashing it (a fresh bytes object each request). One slot
# holding a pair, replaced whole.
_LAST_HOST: Final[list[tuple[bytes, bytes]]] = [(b"", b"")]
# `int in bytes`: `b"?" in name` first tries the bytes as an index, and the TypeError it formats
# and clears costs ~2,000 instructions.
_QUESTION_MARK: Final = ord("?")
_SLASH: Final = ord("/")
# Whatever the known hosts map to. `split_outbound_target` takes them as a dict, not a Mapping:
# compiled, `in` is then a dict look-up, not a generic containment call.
_Route = TypeVar("_Route")


def host_name(host: bytes) -> bytes:
    """`Payment:8080` -> `payment` (cached: Host headers repeat)."""
    name = (host if b"]" in host else host.rsplit(b":", 1)[0]).lower()
    if len(_HOST_NAMES) < 1024:
        _HOST_NAMES[host] = name
    return name


def split_outbound_target(
    request: RequestHead, known_hosts: dict[bytes, _Route]
) -> tuple[bytes, bytes] | None:
    """(upstream name, path for the upstream) of an outbound request, None if unparseable.

    Absolute form (`GET http://payment/v1/x`, an HTTP proxy client) names the upstream by host;
    origin form uses `Host: payment` when that is an upstream, else the first path segment
    (`/payment/v1/x`).
    """
    target = request.target
    if target and target[0] == _SLASH:  # compiled, native: no slice to compare
        raw = request.host
        if raw:
            last = _LAST_HOST[0]
            if raw == last[0]:
                host = last[1]
            else:
                host = _HOST_NAMES.get(raw) or host_name(raw)
                _LAST_HOST[0] = (raw, host)
            if host in known_hosts:
                return host, target
        # The first segment names the upstream.
        if COMPILED:  # a native loop over a short name: a bytes method call costs ~600 here
            end, i = len(target), 1
            while i < end:
                c = target[i]
                if c in (_SLASH, _QUESTION_MARK):
                    break
                i += 1
            query = i < end and target[i] == _QUESTION_MARK  # no slice made to compare
        else:  # `partition` over two `find(x, 1)`: a find with a start parses a tuple
            i = 1 + len(target[1:].partition(b"/")[0])
            if _QUESTION_MARK in target[1:i]:
                i = target.find(b"?")
            query = target[i : i + 1] == b"?"
        if query:  # a query before any slash: `/payment?x` is `/?x` there
            return target[1:i], b"/" + target[i:]
        return target[1:i], target[i:] or b"/"
    if target[:7].lower() == b"http://":
        slash = target.find(b"/", 7)
        authority = target[7:] if slash < 0 else target[7:slash]
        path = b"/" if slash < 0 else target[slash:]
        if path[:1] != b"/":
            path = b"/" + path
        host = authority.rsplit(b"@", 1)[-1]
        if b"]" not in host:
            host = host.rsplit(b":", 1)[0]
        return host.lower(), path
    return None


class OutboundHandler(RequestHandler):
    """The app's calls to its upstreams."""

    def __init__(self, runtime: SidecarRuntime) -> None:
        self.runtime = runtime
        # (routes, name, route) of the last request: most often this one's upstream too, found
        # by comparing its name instead of hashing it (a fresh bytes object each request).
        self._last: tuple[Mapping[bytes, Route] | None, bytes, Route | None] = (None, b"", None)

    def handle(self, conn: ServerConnection, request: RequestHead) -> Exchange:
        """Resolve the upstream; 404 JSON when there is no such upstream."""
        runtime = self.runtime
        split = split_outbound_target(request, runtime.routes_by_host)
        if split is None:
            return FixedExchange(
                conn,
                request,
                lambda close: error_response(
                    400, "request target must be a path or an http:// URL", close
                ),
            )
        name, path = split
        routes = runtime.routes_by_host
        last_routes, last_name, route = self._last
        if last_routes is not routes or name != last_name:
            route = routes.get(name)  # names are lower case: as sent, one lookup and no lower()
            if route is None:
                route = routes.get(name.lower())
            if route is not None:
                self._last = (routes, name, route)
        if route is None:
            upstream = name.decode("latin-1")
            return FixedExchange(
                conn,
                request,
                lambda close: error_response(404, "unknown upstream", close, upstream=upstream),
            )
        return ProxyExchange(runtime, conn, request, route, path, Direction.OUTBOUND)


class InboundHandler(RequestHandler):
    """Callers reaching the local app."""

    def __init__(self, runtime: SidecarRuntime) -> None:
        self.runtime = runtime
        assert runtime.app_route is not None
        self.route = runtime.app_route

    def handle(self, conn: ServerConnection, request: RequestHead) -> Exchange:
        """Forward to the app, origin-form path kept."""
        target = request.target
        if not (target and target[0] == _SLASH):  # compiled, native: no slice to compare
            if target[:7].lower() == b"http://":
                slash = target.find(b"/", 7)
                target = b"/" if slash < 0 else target[slash:]
            elif target == b"*":
                target = b"*"
            else:
                return FixedExchange(
                    conn, request, lambda close: error_response(400, "bad request target", close)
                )
        return ProxyExchange(self.runtime, conn, request, self.route, target, Direction.INBOUND)
