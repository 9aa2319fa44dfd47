"""The cascade on the request path: a `RequestHook` for both listeners, and its installation.

Inbound (a caller reaching our app): refuse requests to our own unavailable endpoints (503 with
the cause chain); honour learning headers only when the `ccb-hop` token verifies, and strip
every `ccb-*` header before the app sees it (outside clients cannot steer learning through
it); remember the trace so the app's outbound calls are attributed to the endpoint it serves;
answer verified sidecars with `ccb-sidecar-grpc: host:port <token>` (the token binds our
address to their hop token) so they subscribe to our `Watch` stream.

Outbound (our app calling an upstream): learn the edge (explicit header or trace context),
refuse a call to an unavailable target endpoint, reroute to a configured alternative while the
primary is unavailable, add our `ccb-hop` token, and subscribe to the upstream's sidecar when
its response names one with a token that verifies (a plain upstream cannot make us dial out).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final, cast

from cascadebreaker import State
from cascadebreaker.cascade import (
    HOP_HEADER,
    OPTIONAL_HEADER,
    SERVING_ENDPOINT_HEADER,
    Endpoint,
    Unavailability,
    hop_material,
)
from cascadebreaker.cascade.updates import chain_to_list
from cascadebreaker.contract import Reason, rejection_body
from cascadebreaker.sidecar.http.wire import COMPILED, RawHeaders, json_response
from cascadebreaker.sidecar.proxy.hooks import (
    CAUSE_HEADER,
    BareCallHook,
    Direction,
    Rejection,
    RequestHook,
    RequestInfo,
    SettledCall,
)
from cascadebreaker.sidecar.proxy.refusals import (
    ENDPOINT_UNAVAILABLE,
    REFUSAL_HEADER,
    UPSTREAM_UNAVAILABLE,
    open_seal,
    seal,
)

if TYPE_CHECKING:
    from cascadebreaker.sidecar.mesh.node import CascadeNode
    from cascadebreaker.sidecar.proxy.ports import RefusalTrust, RoutePort

__all__ = [
    "CAUSE_HEADER",
    "SIDECAR_GRPC_HEADER",
    "CascadeHook",
    "CascadeRejection",
    "sealed_refusal_trust",
]

log: Final = logging.getLogger("cascadebreaker.sidecar.cascade")

SIDECAR_GRPC_HEADER: Final = "ccb-sidecar-grpc"

_HOP: Final = HOP_HEADER.encode()
_GRPC: Final = SIDECAR_GRPC_HEADER.encode()
_GRPC_SIZE: Final = len(_GRPC)
_STRIP_OUTBOUND: Final = frozenset({_HOP, _GRPC})
_GRPC_ONLY: Final = frozenset({_GRPC})
_OURS: Final = frozenset({_GRPC, REFUSAL_HEADER})  # response headers only a sidecar may send
_INBOUND: Final = Direction.INBOUND  # a module constant: an enum member read costs a Python call


class _Sent(SettledCall):
    """What the hook keeps about one outbound call (`RequestInfo.state`, or the call it
    settled); a bare call's is made once per hop token and shared by its calls."""

    __slots__ = ("callee", "hop", "token", "trace_key")

    def __init__(
        self,
        hook: CascadeHook,
        token: str | None,
        trace_key: str | None,
        callee: Endpoint,
        hop: tuple[bytes, bytes] | None = None,
    ) -> None:
        # `lines`: the hop token's header line, forwarded with a settled call
        super().__init__(hook, b"" if hop is None else b"%b: %b\r\n" % hop)
        self.token = token  # the hop token we sent: peer claims and refusal seals bind to it
        self.trace_key = trace_key  # the trace it was made under (evidence of optionality)
        self.callee = callee
        self.hop = hop  # the token's header, for a call that has a `RequestInfo`


class _BareCall:
    """An outbound call line seen before with none of the headers the cascade reads: its
    callee, and its hop token header while the second the token is stamped with lasts."""

    __slots__ = (
        "callee",
        "material",
        "method",
        "path",
        "raw_method",
        "raw_path",
        "second",
        "sent",
        "token",
        "until",
        "upstream",
    )

    def __init__(
        self,
        hook: CascadeHook,
        upstream: str,
        method: str,
        path: str,
        callee: Endpoint,
        material: str,
    ) -> None:
        self.upstream = upstream  # the call line it names (its key in `CascadeHook._bare`)
        self.method = method
        self.path = path
        self.callee = callee
        self.material = material  # what the hop token binds (hop_material of the call)
        # `method` and `path` as the last request of this line spelled them on the wire
        self.raw_method = b""
        self.raw_path = b""
        # The token's whole second [second, until); -1: none issued yet. Two comparisons of
        # floats decide whether it still holds (no `int()` call per request).
        self.second = -1.0
        self.until = -1.0
        self.token = ""
        self.sent = _Sent(hook, None, None, callee)  # what its calls are settled with


_MAX_BARE_CALLS: Final = 1024


class _Received(SettledCall):
    """What the hook keeps about one inbound call (`RequestInfo.state`, or the call it
    settled: that one never has a trace)."""

    __slots__ = ("caller_hop", "sent_hop", "trace_key")

    def __init__(
        self,
        hook: CascadeHook,
        caller_hop: str | None,
        sent_hop: str,
        trace_key: str | None = None,
    ) -> None:
        super().__init__(hook)
        self.caller_hop = caller_hop  # the verified caller's hop token: its peer claim binds it
        self.sent_hop = sent_hop  # the token as sent (or ""): a relayed refusal is sealed to it
        self.trace_key = trace_key  # the trace the app's calls are attributed to, to end


class _InboundLine:
    """An inbound call line seen before: the endpoint it serves and what its hop token binds."""

    __slots__ = ("endpoint", "material", "raw_method", "raw_path")

    def __init__(self, endpoint: Endpoint, material: str, method: bytes, path: bytes) -> None:
        self.endpoint = endpoint
        self.material = material  # hop_material of the line, with no learning header
        self.raw_method = method  # the line as the wire spelled it, compared as bytes
        self.raw_path = path


class CascadeRejection(Rejection):
    """A 503 for an unavailable endpoint (the contract's body, reasonCode `cascade`): the cause
    chain in `ccb-cause` and in the body."""

    __slots__ = ("cause",)

    def __init__(
        self,
        error: str,
        names: dict[str, str],
        unavailability: Unavailability,
        wall: float,
        refusal: bytes | None = None,
        state: State = State.CLOSED,
    ) -> None:
        wait = max(unavailability.expires_at - wall, 0.0)
        body = rejection_body(
            error=error,
            reason=Reason.CASCADE,
            state=state,
            retry_after=wait,
            cause_chain=chain_to_list(unavailability.cause_chain),
            **names,
        )
        super().__init__(body, 503, wait, refusal)
        # Root first, comma separated: `payment * *, checkout POST /v1/orders`.
        self.cause = ", ".join(str(c.endpoint) for c in unavailability.cause_chain).encode(
            "latin-1", "replace"
        )

    def to_bytes(self, close: bool = False) -> bytes:
        """The complete HTTP response, with `ccb-cause`."""
        extra = [(CAUSE_HEADER.encode(), self.cause), *self.headers()]
        return json_response(self.status, self.body, extra, close=close)


# Every header the cascade reads (learning, trust, trace context), and the one it only strips.
_READ: Final = {
    name.encode(): name
    for name in (
        HOP_HEADER,
        SIDECAR_GRPC_HEADER,
        SERVING_ENDPOINT_HEADER,
        OPTIONAL_HEADER,
        "traceparent",
        "b3",
        "x-b3-traceid",
        "x-b3-spanid",
        "x-request-id",
    )
}


# Raw name (as spelled on the wire) -> what `_READ` says of its lower-case form: header names
# repeat, so most requests look each one up once and lower-case none.
_READ_RAW: Final[dict[bytes, str | None]] = {}
_MAX_RAW_NAMES: Final = 4096
_UNSEEN: Final = "-"  # never a header name the cascade reads

# Raw names seen before that the cascade neither reads nor strips (no `ccb-` prefix): when a
# request's names are all in here, one set look-up per name settles that it carries nothing
# for the cascade (no lower-casing, no dict built). The same for response names that are not
# ours (`_OURS`). Both are filled on the slower paths, and bounded.
_PLAIN_REQUEST: Final[set[bytes]] = set()
_PLAIN_RESPONSE: Final[set[bytes]] = set()
_NO_HEADERS: Final[dict[str, str]] = {}  # `_read` of a request with none of ours; never written to


def may_be_read(name: bytes) -> bool:
    """False for a request header name the cascade neither reads nor strips, settled by its
    length and bytes: every name of `_READ` and every `ccb-*` name passes (in any case). A name
    that passes is looked up as before; compiled, most names are settled without hashing them
    (the reader no longer hashes them: a set look-up would pay siphash here)."""
    size = len(name)
    if size == 2 or size == 11 or size == 12:  # b3; traceparent, x-b3-spanid; x-b3-traceid...
        initial = name[0] | 0x20
        if initial == 0x74 or initial == 0x62 or initial == 0x78:  # t, b, x
            return True
    return is_cascade_header(name)


def _plain_request(headers: RawHeaders) -> bool:
    """True when every request header is one seen before as neither read nor `ccb-*`."""
    plain = _PLAIN_REQUEST
    if COMPILED:  # a few byte reads a name; interpreted, the set look-up in C is cheaper
        for name, _ in headers:  # noqa: SIM110 - as below
            if may_be_read(name) and name not in plain:
                return False
        return True
    for name, _ in headers:  # noqa: SIM110 - a plain loop: no generator to resume per name
        if name not in plain:
            return False
    return True


def _plain_response(headers: RawHeaders) -> bool:
    """True when every response header is one seen before as not ours (`_OURS`)."""
    plain = _PLAIN_RESPONSE
    if COMPILED:  # ours are `ccb-*`: any other name is settled by four byte reads
        for name, _ in headers:  # noqa: SIM110 - as below
            if is_cascade_header(name) and name not in plain:
                return False
        return True
    for name, _ in headers:  # noqa: SIM110 - as above
        if name not in plain:
            return False
    return True


def _learn_plain_response(headers: RawHeaders) -> None:
    """Remember the response names that are not ours, for `_plain_response`."""
    if len(_PLAIN_RESPONSE) < _MAX_RAW_NAMES:
        _PLAIN_RESPONSE.update(n for n, _ in headers if n.lower() not in _OURS)


def _read(headers: RawHeaders) -> dict[str, str]:
    """The headers the cascade reads, as a dict built once per request (first value wins)."""
    found: dict[str, str] = {}
    plain = _PLAIN_REQUEST
    for name, value in headers:
        if COMPILED and not may_be_read(name):  # settled by its bytes: no hashing
            continue
        if name in plain:  # most names: one set look-up
            continue
        key = _READ_RAW.get(name, _UNSEEN)
        if key is _UNSEEN:
            lower = name.lower()
            key = _READ.get(lower)
            if len(_READ_RAW) < _MAX_RAW_NAMES:
                _READ_RAW[name] = key
                if key is None and lower[:4] != b"ccb-":
                    _PLAIN_REQUEST.add(name)
        if key is not None and key not in found:
            found[key] = value.decode("latin-1")
    return found


def _take(headers: RawHeaders, names: frozenset[bytes]) -> list[tuple[bytes, bytes]]:
    """Remove headers in place; return them as (lower-case name, value)."""
    for name, _ in headers:  # a plain loop: no generator to resume per header
        if name.lower() in names:
            break
    else:
        return []
    taken = [(n.lower(), v) for n, v in headers if n.lower() in names]
    headers[:] = [(n, v) for n, v in headers if n.lower() not in names]
    return taken


def _strip(headers: RawHeaders, names: frozenset[bytes]) -> list[bytes]:
    """Remove headers in place (the proxy forwards this very list); return their values."""
    for name, _ in headers:  # a plain loop: no generator to resume per header
        if name.lower() in names:
            break
    else:
        return []
    values = [v for n, v in headers if n.lower() in names]
    headers[:] = [(n, v) for n, v in headers if n.lower() not in names]
    return values


def is_cascade_header(name: bytes) -> bool:
    """True for a `ccb-*` name, in any case: `name[:4].lower() == b"ccb-"` without the slice
    and the method call (compiled, four byte reads; `c | 0x20 == ord("c")` holds for `c`
    and `C` only)."""
    return (
        len(name) > 3
        and name[3] == 0x2D  # "-"
        and name[0] | 0x20 == 0x63  # "c"
        and name[1] | 0x20 == 0x63  # "c"
        and name[2] | 0x20 == 0x62  # "b"
    )


def _strip_cascade_headers(headers: RawHeaders) -> None:
    """Remove every `ccb-*` header in place: they are for sidecars, never for the app."""
    # Deleted where found: a request from a sidecar always carries one (its hop token), and a
    # deletion moves pointers where a new list would build one.
    at = len(headers) - 1
    while at >= 0:
        if is_cascade_header(headers[at][0]):
            del headers[at]
        at -= 1


class CascadeHook(BareCallHook, RequestHook):
    """The cascade's `RequestHook` (one instance serves both directions); it settles the bare
    outbound call (`BareCallHook`: no `RequestInfo` for it).

    It names the Protocol as a base: compiled, the hook chain calls it through mypyc's trait
    vtable instead of a generic method call."""

    def __init__(self, node: CascadeNode) -> None:
        self.node = node
        self.runtime = node.runtime
        self.learner = node.learner
        self.templates = node.templates
        self.table = node.table
        self.learning = node.config.learning
        self.alternatives = node.config.alternatives
        # Most meshes configure none: then no call looks its upstream up in them.
        self._rerouting = bool(self.alternatives)
        self._wall = node.learner._wall
        # Hop tokens name the service between dots: a dotted name cannot issue them.
        self._signs_hops = "." not in node.service
        if not self._signs_hops:
            log.warning(
                "cascade: service name %r has a '.': no hop tokens, so upstream sidecars will "
                "not name their gRPC address to us; list them under cascade.peers",
                node.service,
            )
        # The path prefix each upstream's URL adds: the hop token binds the path as forwarded.
        self._base_paths = {
            name: route.target.base_path.decode("latin-1")
            for name, route in self.runtime.routes.items()
        }
        # (upstream, method, path) -> _BareCall: the common outbound call, named once.
        self._bare: dict[tuple[str, str, str], _BareCall] = {}
        self._bare_version = self.templates.version
        # The last one used: an app calls the same line again and again, and comparing it
        # costs less than hashing the request's fresh method and path strings for the memo.
        self._last_bare: _BareCall | None = None
        # The same for inbound call lines: (method, path) -> _InboundLine, and the last one.
        self._lines: dict[tuple[str, str], _InboundLine] = {}
        self._lines_version = self.templates.version
        self._last_line: _InboundLine | None = None

    def settle(
        self, upstream: str, method: bytes, path: bytes, headers: RawHeaders
    ) -> _Sent | None:
        """The bare outbound call (no cascade header, no alternative, not refused): named from
        the memo of its line, checked, signed. The most frequent call of all, so its steps are
        written here (one Python call per step fewer)."""
        if COMPILED:
            if not _plain_request(headers):
                return None
        else:
            plain = _PLAIN_REQUEST
            for name, _ in headers:  # `_plain_request`, inlined: a Python call fewer a call
                if name not in plain:
                    return None
        if self._rerouting and upstream in self.alternatives:
            return None
        bare = self._last_bare
        if (
            bare is None
            or bare.raw_path != path
            or bare.raw_method != method
            or bare.upstream != upstream
            or self._bare_version != self.templates.version
        ):
            bare = self._bare_call(upstream, method.decode(), path.decode("latin-1"))
            self._last_bare = bare
            # The same line on the wire: compared as bytes, nothing is decoded next time.
            bare.raw_method = method
            bare.raw_path = path
        refusal = self.table.check(bare.callee)
        if refusal is not None and not _own_breaker(refusal, upstream, bare.callee):
            return None  # `on_request` refuses it, with the cause chain
        if self._signs_hops:
            now = self._wall()
            if not bare.second <= now < bare.until:
                self._sign(bare, now)
        return bare.sent

    def settled_response(
        self, upstream: str, settled: SettledCall, status: int, outcome: str, headers: RawHeaders
    ) -> None:
        """The outcome of a call `settle` or `settle_inbound` let go."""
        if isinstance(settled, _Received):
            self._inbound_done(settled, status, outcome, headers)
            return
        self._outbound_done(upstream, cast(_Sent, settled), outcome, headers)

    def on_request(self, info: RequestInfo) -> Rejection | None:
        """Refuse, learn, strip or add headers, reroute."""
        if info.direction is _INBOUND:
            received = self.settle_inbound(
                info.raw_method, info.raw_path, info.headers, info.client
            )
            if received is not None:
                info.state = received
                return None
            return self._inbound(info)
        headers = info.headers
        sent = self.settle(info.target, info.raw_method, info.raw_path, headers)
        if sent is not None:
            if sent.hop is not None:
                info.add_headers.append(sent.hop)
            info.state = sent
            return None
        return self._outbound(info, _NO_HEADERS if _plain_request(headers) else _read(headers))

    def on_response(self, info: RequestInfo, status: int, outcome: str) -> None:
        """End the trace of an inbound request; discover the sidecar behind an upstream."""
        if info.direction is _INBOUND:
            received: _Received | None = info.state
            if received is not None:
                self._inbound_done(received, status, outcome, info.response_headers)
            return
        sent: _Sent | None = info.state
        if sent is not None:
            self._outbound_done(info.reroute or info.target, sent, outcome, info.response_headers)

    def _outbound_done(self, upstream: str, sent: _Sent, outcome: str, headers: RawHeaders) -> None:
        """Weigh the call's outcome as evidence; discover the sidecar behind `upstream`."""
        if outcome != "success":  # failed, refused by us or by the upstream's sidecar
            self.learner.call_failed(sent.trace_key, sent.callee)
        elif sent.trace_key is not None:  # a retry that succeeded undoes the failure's evidence
            self.learner.call_succeeded(sent.trace_key, sent.callee)
        # For sidecars only; the app never sees it. Most responses carry only names seen
        # before (one C-level pass); names of its length are rare, so the others are looked
        # through without lower-casing a name.
        if COMPILED:
            if _plain_response(headers):
                return
        else:
            plain = _PLAIN_RESPONSE
            for name, _ in headers:  # `_plain_response`, inlined, as above
                if name not in plain:
                    break
            else:
                return
        _learn_plain_response(headers)
        for name, _ in headers:
            if len(name) == _GRPC_SIZE and name.lower() == _GRPC:
                claims = _strip(headers, _GRPC_ONLY)
                if sent.token is not None:
                    self.node.peer_claimed(upstream, claims[0], sent.token)
                return

    def _reseal_relayed_refusal(self, headers: RawHeaders, value: bytes, sent_hop: str) -> None:
        """The app relays a refusal: only one our outbound gave it passes, sealed for the
        caller (`refusals.py`); any other `ccb-refusal` from the app stays dropped."""
        code = open_seal(self.runtime.refusal_key, value)
        if code is not None:
            mark = seal(self.node.secret, code, sent_hop)
            headers.append((REFUSAL_HEADER, mark))

    # -- inbound ----------------------------------------------------------------------------

    def settle_inbound(
        self, method: bytes, path: bytes, headers: RawHeaders, client: str
    ) -> _Received | None:
        """The bare inbound call: no header the cascade reads but a caller's hop token, its
        line named before, its endpoint available, no trace to begin (`Learner.bare_inbound`).
        The rest (learning headers, trace context, a refusal, no learning) is `_inbound`'s."""
        if not self.learning:
            return None
        token: str | None = None
        at = -1
        plain = _PLAIN_REQUEST
        for index, (name, value) in enumerate(headers):
            if COMPILED and not may_be_read(name):  # settled by its bytes: no hashing
                continue
            if name in plain:
                continue
            if token is None and (name == _HOP or name.lower() == _HOP):
                token = value.decode("latin-1")
                at = index
                continue
            return None  # a header to read (or one not seen before): `_inbound` reads it
        line = self._last_line
        if (
            line is None
            or line.raw_path != path
            or line.raw_method != method
            or self._lines_version != self.templates.version
        ):
            line = self._inbound_line(method, path)
            self._last_line = line
        from_sidecar = self.learner.bare_inbound(
            line.endpoint, token, line.material, peer_host=client
        )
        if from_sidecar is None:
            return None
        if at >= 0:  # the only `ccb-*` header: the app never sees it
            del headers[at]
        sent_hop = token or ""
        return _Received(self, sent_hop if from_sidecar and self._signs_hops else None, sent_hop)

    def _inbound_line(self, method: bytes, path: bytes) -> _InboundLine:
        """The memo of an inbound call line (named on first sight)."""
        memo = self._lines
        if self._lines_version != self.templates.version:  # a template was added: rename
            memo.clear()
            self._lines_version = self.templates.version
        text_method, text_path = method.decode(), path.decode("latin-1")
        key = (text_method, text_path)
        line = memo.get(key)
        if line is None:
            endpoint = self.templates.endpoint(self.learner.service, text_method, text_path)
            material = hop_material(text_method, text_path, None)
            line = _InboundLine(endpoint, material, method, path)
            if len(memo) >= _MAX_BARE_CALLS:
                memo.clear()  # cheap bound; refills with the hot call lines
            memo[key] = line
        return line

    def _inbound_done(
        self, received: _Received, status: int, outcome: str, headers: RawHeaders
    ) -> None:
        """End the call's trace; keep our headers ours; name our address to a verified caller."""
        trace_key = received.trace_key
        if trace_key is not None:  # no trace: nothing to end, no evidence to weigh
            succeeded = outcome != "failure" and status < 600 and self.node.success[status]
            self.node.send(self.learner.inbound_done(trace_key, succeeded))
        # Only we name our address and mark refusals: one pass takes both from the app's.
        if not _plain_response(headers):
            _learn_plain_response(headers)
            taken = _take(headers, _OURS)
            refusals = [v for n, v in taken if n == REFUSAL_HEADER]
            if refusals and status == 503:
                self._reseal_relayed_refusal(headers, refusals[0], received.sent_hop)
        caller_hop = received.caller_hop
        if caller_hop is not None and outcome != "rejected":
            claim = self.node.peer_claim(caller_hop)
            if claim is not None:
                headers.append((_GRPC, claim))

    def _inbound(self, info: RequestInfo) -> Rejection | None:
        headers = info.headers
        plain = _plain_request(headers)  # nothing to learn from, nothing to strip
        found = _NO_HEADERS if plain else _read(headers)
        get = found.get
        if self.learning:
            hop = found.get(HOP_HEADER)
            if hop is not None and len(found) == 1:  # a hop token alone: the common request
                decision = self.learner.inbound_hop(
                    info.method, info.path, hop, peer_host=info.client
                )
            else:
                decision = self.learner.inbound(
                    info.method, info.path, None if plain else get, peer_host=info.client
                )
            endpoint, refusal = decision.endpoint, decision.refusal
            trace_key, from_sidecar = decision.trace_key, decision.from_sidecar
            if decision.started_trace is not None:  # `start_traces`: the app joins our trace
                headers.append((b"traceparent", decision.started_trace.encode("ascii")))
        else:
            endpoint = self.templates.endpoint(info.service, info.method, info.path)
            refusal = self.table.check(endpoint)
            trace_key = None
            token = get(HOP_HEADER)
            from_sidecar = token is not None and self._hop_trusted(info, get, token)
        sent_hop = found.get(HOP_HEADER) or ""  # what the caller's sidecar binds our refusals to
        if refusal is not None:
            self.node.refused("inbound")
            names = {"service": info.service, "endpoint": str(endpoint)}
            mark = seal(self.node.secret, ENDPOINT_UNAVAILABLE, sent_hop)
            return CascadeRejection("endpoint unavailable", names, refusal, self._wall(), mark)
        # The app never needs the cascade's headers; passed on, they could steer its calls.
        if not plain:
            _strip_cascade_headers(headers)
        caller_hop = sent_hop if from_sidecar and self._signs_hops else None
        info.state = _Received(self, caller_hop, sent_hop, trace_key)
        return None

    def _hop_trusted(self, info: RequestInfo, get: Any, token: str) -> bool:
        material = hop_material(info.method, info.path, get)
        check = self.learner.trust.check(
            token, peer_host=info.client, now=self._wall(), material=material
        )
        return check.trusted

    # -- outbound ---------------------------------------------------------------------------

    def _outbound(self, info: RequestInfo, found: dict[str, str]) -> Rejection | None:
        headers = info.headers
        upstream = info.target
        get = found.get
        alternative = self.alternatives.get(upstream)
        trace_key = None
        bare: _BareCall | None = None
        if not found:  # nothing to learn from, no hop token to strip: the common call
            bare = self._bare_call(upstream, info.method, info.path)
            callee = bare.callee
            refusal = self.table.check(callee)
        elif self.learning:
            # A call with an alternative upstream has a fallback: its edge is optional.
            learn_get = get if alternative is None else _optional(get)
            decision = self.learner.outbound(upstream, info.method, info.path, learn_get)
            if decision.updates:  # a known edge changes nothing: the usual case
                self.node.send(decision.updates)
            callee, refusal, trace_key = decision.callee, decision.refusal, decision.trace_key
        else:
            callee = self.templates.endpoint(upstream, info.method, info.path)
            refusal = self.table.check(callee)
        if refusal is not None and _own_breaker(refusal, upstream, callee):
            refusal = None  # our breaker for this upstream answers for itself (and probes)
        if alternative is not None and (refusal is not None or self._breaker_open(upstream)):
            alt_callee = Endpoint(alternative, callee.method, callee.template)
            if self.table.check(alt_callee) is None and not self._breaker_open(alternative):
                info.reroute = upstream = alternative
                refusal = None
        if refusal is not None:
            self.node.refused("outbound")
            info.state = _Sent(self, None, trace_key, callee)  # a refused call: evidence too
            names = {"upstream": upstream, "endpoint": str(callee)}
            mark = seal(self.runtime.refusal_key, UPSTREAM_UNAVAILABLE)
            route = self.runtime.routes.get(upstream)
            state = route.breaker.state if route is not None and route.breaker else State.CLOSED
            return CascadeRejection(
                "upstream endpoint unavailable", names, refusal, self._wall(), mark, state
            )
        if found and (get(HOP_HEADER) is not None or get(SIDECAR_GRPC_HEADER) is not None):
            _strip(headers, _STRIP_OUTBOUND)  # the app must not pass another hop's token on
        token = None
        if self._signs_hops:
            # The token binds the request line and the learning headers' values: with neither
            # header (trace context only, say) it is the bare call's, issued once a second.
            if upstream == info.target and (
                bare is not None or (not get(SERVING_ENDPOINT_HEADER) and not get(OPTIONAL_HEADER))
            ):
                if bare is None:
                    bare = self._bare_call(upstream, info.method, info.path)
                now = self._wall()
                if not bare.second <= now < bare.until:
                    self._sign(bare, now)
                token = bare.token
                hop = bare.sent.hop  # the second's header, made once by `_sign`
                assert hop is not None
                info.add_headers.append(hop)
            else:
                base = self._base_paths.get(upstream, "")
                token = self.learner.hop_token(
                    info.method, base + info.path, get if found else None
                )
                info.add_headers.append((_HOP, token.encode("latin-1")))
        info.state = _Sent(self, token, trace_key, callee)
        return None

    def _bare_call(self, upstream: str, method: str, path: str) -> _BareCall:
        """The memo of a call line without cascade headers (named on first sight)."""
        memo = self._bare
        if self._bare_version != self.templates.version:  # a template was added: rename
            memo.clear()
            self._bare_version = self.templates.version
        key = (upstream, method, path)
        bare = memo.get(key)
        if bare is None:
            callee = self.templates.endpoint(upstream, method, path)
            base = self._base_paths.get(upstream, "")
            bare = _BareCall(
                self, upstream, method, path, callee, hop_material(method, base + path, None)
            )
            if len(memo) >= _MAX_BARE_CALLS:
                memo.clear()  # cheap bound; refills with the hot call lines
            memo[key] = bare
        return bare

    def _sign(self, bare: _BareCall, now: float) -> None:
        """Issue the hop token of a bare call for the second of `now` (tokens stamp whole
        seconds: it is the very token `Learner.hop_token` gives within that second)."""
        learner = self.learner
        token = learner.trust.issue(learner.service, now, bare.material)
        bare.token = token
        bare.sent = _Sent(self, token, None, bare.callee, (_HOP, token.encode("latin-1")))
        bare.second = float(int(now))
        bare.until = bare.second + 1.0

    def _breaker_open(self, upstream: str) -> bool:
        route = self.runtime.routes.get(upstream)
        breaker = route.breaker if route is not None else None
        return breaker is not None and breaker.state is State.OPEN and breaker.retry_after > 0


def sealed_refusal_trust(secret: bytes) -> RefusalTrust:
    """Honour an upstream's `ccb-refusal` only when sealed under the mesh secret for the hop
    token we sent with the call (a plain upstream cannot forge it)."""

    def trusted(route: RoutePort, state: object, value: bytes) -> bool:
        token = state.token if isinstance(state, _Sent) and state.token is not None else ""
        return open_seal(secret, value, token) is not None

    return trusted


def _own_breaker(refusal: Unavailability, upstream: str, callee: Endpoint) -> bool:
    """True when the only cause is this sidecar's breaker for `upstream` itself (or, with
    `breaker.scope: endpoint`, for the target endpoint)."""
    chain = refusal.cause_chain
    return len(chain) == 1 and chain[0].endpoint in (Endpoint.service_wide(upstream), callee)


def _optional(get: Any) -> Any:
    def wrapped(name: str) -> str | None:
        return "1" if name == OPTIONAL_HEADER else get(name)

    return wrapped
