"""The two per-request hooks a sidecar calls: one per inbound request, one per outbound call.

Header access is a getter `get(lower_case_name) -> str | None` so any HTTP parser fits.
Inbound learning headers are the caller sidecar's business; the inbound hook reports whether
they are trusted so the sidecar can strip them before the request reaches the app.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from cascadebreaker.cascade.availability import AvailabilityTable, Unavailability
from cascadebreaker.cascade.endpoints import Endpoint, RouteTemplates, normalize_template
from cascadebreaker.cascade.graph import EdgeSource
from cascadebreaker.cascade.optionality import SurvivalLedger, TrickleGate
from cascadebreaker.cascade.trace import TraceTable, trace_key_of
from cascadebreaker.cascade.trust import (
    HOP_HEADER,
    OPTIONAL_HEADER,
    SERVING_ENDPOINT_HEADER,
    HopTrust,
)
from cascadebreaker.cascade.updates import AvailabilityUpdate

__all__ = ["HeaderGetter", "InboundDecision", "Learner", "OutboundDecision", "hop_material"]

HeaderGetter = Callable[[str], str | None]

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_NAMED_CACHE: Final = 1024
_UNPARSED: Final = Endpoint("-", "-", "-")  # cache sentinel: never a real endpoint name


def hop_material(method: str, path: str, get: HeaderGetter | None) -> str:
    """What a hop token binds: the request line and the learning header values (`get` None:
    a request that carries none of them)."""
    if get is None:
        return _bound(method, path, "", "")
    return _bound(method, path, get(SERVING_ENDPOINT_HEADER) or "", get(OPTIONAL_HEADER) or "")


def _bound(method: str, path: str, serving: str, optional: str) -> str:
    return f"{method.upper()} {path}|{serving}|{optional}"


# The decisions are plain classes, not NamedTuples or dataclasses: compiled, those are built
# by generated Python code (~2k instructions a request), a plain class natively.
class InboundDecision:
    """What the inbound hook decided for one request to our app."""

    __slots__ = ("endpoint", "from_sidecar", "refusal", "started_trace", "trace_key")

    def __init__(
        self,
        endpoint: Endpoint,
        trace_key: str | None,
        refusal: Unavailability | None,
        from_sidecar: bool,
        started_trace: str | None = None,
    ) -> None:
        self.endpoint = endpoint  # our endpoint being served
        self.trace_key = trace_key  # pass back to `inbound_done`
        self.refusal = refusal  # refuse with 503 when set
        self.from_sidecar = from_sidecar  # learning headers are trusted; strip them when False
        self.started_trace = started_trace  # a `traceparent` to add to the request (we began it)

    def __repr__(self) -> str:
        return (
            f"InboundDecision({self.endpoint!r}, trace_key={self.trace_key!r}, "
            f"refusal={self.refusal!r}, from_sidecar={self.from_sidecar!r}, "
            f"started_trace={self.started_trace!r})"
        )


class OutboundDecision:
    """What the outbound hook decided for one call our app makes."""

    __slots__ = ("callee", "caller", "refusal", "trace_key", "updates")

    def __init__(
        self,
        callee: Endpoint,
        caller: Endpoint | None,
        refusal: Unavailability | None,
        updates: tuple[AvailabilityUpdate, ...],
        trace_key: str | None = None,
    ) -> None:
        self.callee = callee
        self.caller = caller  # our endpoint the app was serving, when known
        self.refusal = refusal  # refuse with 503 when set
        self.updates = updates  # send these (a newly learned edge changed things)
        self.trace_key = trace_key  # pass to `call_failed` when the call fails or is refused

    def __repr__(self) -> str:
        return (
            f"OutboundDecision({self.callee!r}, caller={self.caller!r}, "
            f"refusal={self.refusal!r}, updates={self.updates!r}, trace_key={self.trace_key!r})"
        )


class Learner:
    """Names endpoints, correlates traces and learns edges on the request path (O(1))."""

    def __init__(
        self,
        table: AvailabilityTable,
        templates: RouteTemplates,
        traces: TraceTable,
        trust: HopTrust,
        *,
        wall_clock: Callable[[], float],
        learn_from_traces: bool = True,
        ledger: SurvivalLedger | None = None,
        trickle: TrickleGate | None = None,
        new_traceparent: Callable[[], str] | None = None,
    ) -> None:
        self.table = table
        self.service = table.service
        self.templates = templates
        self.traces = traces
        self.trust = trust
        self._wall = wall_clock
        self.learn_from_traces = learn_from_traces
        self._named: dict[str, Endpoint | None] = {}  # `ccb-serving-endpoint` value -> endpoint
        # Learned optionality (None: off): evidence per edge, and the trickle that lets an
        # endpoint held unavailable over a learned edge show that it survives.
        self.ledger = ledger
        self.trickle = trickle
        if ledger is not None and learn_from_traces:
            table.undecided = self.undecided
        # Begin a trace for a request that carries none (None: never), so that an app that
        # passes `traceparent` on gives its calls a trace to be correlated with.
        self.new_traceparent = new_traceparent
        # The last hop material made for an inbound token, with what it was made of: a
        # caller's sidecar sends the same line again and again, and comparing four strings
        # costs less than formatting them. One tuple, replaced whole.
        self._material: tuple[str, str, str, str, str] = ("", "", "", "", "")

    def inbound(
        self, method: str, path: str, get: HeaderGetter | None, *, peer_host: str | None
    ) -> InboundDecision:
        """Hook for a request arriving for our app (before it is forwarded); `get` None: the
        request carries none of the headers it reads (no hop token, no trace context)."""
        token = get(HOP_HEADER) if get is not None else None
        return self._inbound(method, path, token, get, peer_host)

    def inbound_hop(
        self, method: str, path: str, token: str, *, peer_host: str | None
    ) -> InboundDecision:
        """`inbound` for a request whose only header it reads is the hop token `token`: the
        sidecar's common case (a caller's sidecar adds the token, the app added nothing),
        without a header look-up each for the learning headers and the trace context."""
        return self._inbound(method, path, token, None, peer_host)

    def bare_inbound(
        self, endpoint: Endpoint, token: str | None, material: str, *, peer_host: str | None
    ) -> bool | None:
        """`inbound_hop` (or `inbound` of a request with no header it reads: `token` None) for
        a call line the caller named before: `endpoint` and `material` are what `inbound`
        would make of it. True or False when nothing but the token is left to decide (whether
        it verifies); None, with nothing changed, where `inbound` must decide: the endpoint is
        unavailable (refused, or trickled), a trickle holds some endpoint, or a trace would
        begin here."""
        if self.table.check(endpoint) is not None:
            return None
        trickle = self.trickle
        if trickle is not None and trickle.held:
            return None
        if self.learn_from_traces and self.new_traceparent is not None:
            return None
        if token is None:
            return False
        check = self.trust.check(token, peer_host=peer_host, now=self._wall(), material=material)
        return check.trusted

    def _inbound(
        self,
        method: str,
        path: str,
        token: str | None,
        get: HeaderGetter | None,
        peer_host: str | None,
    ) -> InboundDecision:
        endpoint = self.templates.endpoint(self.service, method, path)
        refusal = self.table.check(endpoint)
        trickle = self.trickle
        if refusal is None and trickle is not None and trickle.held:  # any held: rare
            trickle.forget(endpoint)
        from_sidecar = False
        if token is not None:
            material = self._inbound_material(method, path, get)
            check = self.trust.check(
                token, peer_host=peer_host, now=self._wall(), material=material
            )
            from_sidecar = check.trusted
        if refusal is not None and self._trickles(endpoint):
            refusal = None
        key: str | None = None
        started: str | None = None
        if refusal is None and self.learn_from_traces:
            key = trace_key_of(get) if get is not None else None
            if key is None and self.new_traceparent is not None:
                started = self.new_traceparent()
                key = trace_key_of({"traceparent": started}.get)
            if key is not None:
                self.traces.begin(key, endpoint)
        return InboundDecision(endpoint, key, refusal, from_sidecar, started)

    def inbound_done(
        self, trace_key: str | None, succeeded: bool = True
    ) -> tuple[AvailabilityUpdate, ...]:
        """Hook for the end of an inbound request (response sent or failed): `succeeded` says
        whether our app answered success. Calls that failed under it are evidence for or
        against the optionality of their edges; returns the updates a changed verdict causes."""
        if trace_key is None:
            return ()
        endpoint, failed = self.traces.end(trace_key)
        ledger = self.ledger
        if endpoint is None or ledger is None:
            return ()
        changed = set()
        for callee in failed:
            verdict = ledger.observe(endpoint, callee, succeeded)
            if verdict is not None and self.table.graph.set_learned_optional(
                endpoint, callee, verdict
            ):
                changed.add(endpoint)
        changed |= self.traces.settled  # their evidence landed: the rule no longer waits
        self.traces.settled.clear()
        return self.table.graph_changed(changed) if changed else ()

    def undecided(self, endpoint: Endpoint, dependency: Endpoint) -> bool:
        """True while requests for `endpoint` under which a call to `dependency` failed have
        not answered yet, and earlier evidence has not shown that `endpoint` fails with it.

        Under load the failures that trip a breaker arrive before the answers that show the
        endpoint survived them: holding the endpoint then would refuse it falsely. A
        dependency that config declares is never undecided; a learned edge waits at most for
        the requests in flight (bounded by the trace table's ttl)."""
        ledger = self.ledger
        return (
            ledger is not None
            and self.traces.unsettled(endpoint, dependency)
            and not ledger.shown_required(endpoint, dependency)
            and self.table.graph.source(endpoint, dependency) is not EdgeSource.CONFIG
        )

    def settle(self) -> tuple[AvailabilityUpdate, ...]:
        """Re-apply the rule to endpoints whose evidence settled without an answer (expired,
        evicted, retried away); call periodically."""
        traces = self.traces
        traces.sweep()
        if not traces.settled:
            return ()
        changed, traces.settled = traces.settled, set()
        return self.table.graph_changed(changed)

    def call_succeeded(self, trace_key: str | None, callee: Endpoint) -> None:
        """A call our app made (under `trace_key`) succeeded: an earlier failure of the same
        callee in that trace was retried away, so it is no evidence of survival."""
        if trace_key is not None and self.ledger is not None:
            self.traces.callee_answered(trace_key, callee)

    def call_failed(self, trace_key: str | None, callee: Endpoint) -> None:
        """A call our app made (under `trace_key`) failed or was refused."""
        if trace_key is not None and self.ledger is not None:
            self.traces.callee_failed(trace_key, callee)

    def _trickles(self, endpoint: Endpoint) -> bool:
        """Let this request of an unavailable endpoint through (bounded) when it is held over
        a learned, required edge: only evidence can make such an edge optional."""
        trickle, ledger = self.trickle, self.ledger
        if trickle is None or ledger is None or not self.learn_from_traces:
            return False
        graph = self.table.graph
        held = any(
            graph.source(endpoint, dep) is not EdgeSource.CONFIG
            and self.table.check(dep) is not None
            and not ledger.shown_required(endpoint, dep)  # it failed with it: nothing to learn
            for dep in graph.dependencies(endpoint)
        )
        return held and trickle.allow(endpoint)

    def outbound(
        self, target_service: str, method: str, path: str, get: HeaderGetter
    ) -> OutboundDecision:
        """Hook for a call our app makes to `target_service` (headers come from our own app)."""
        callee = self.templates.endpoint(target_service, method, path)
        caller, source, key = self._serving(get)
        updates: tuple[AvailabilityUpdate, ...] = ()
        if caller is not None:
            optional = (get(OPTIONAL_HEADER) or "").strip().lower() in _TRUE
            updates = self.table.learn(caller, callee, optional=optional, source=source)
        return OutboundDecision(callee, caller, self.table.check(callee), updates, key)

    def outbound_bare(
        self, target_service: str, method: str, path: str
    ) -> tuple[Endpoint, Unavailability | None]:
        """`outbound` for a call that carries none of the headers it reads (no learning header,
        no trace context): no caller, so nothing to learn; only the callee and its refusal.
        The sidecar's common case, without the header look-ups and the decision object."""
        callee = self.templates.endpoint(target_service, method, path)
        return callee, self.table.check(callee)

    def hop_token(self, method: str, path: str, get: HeaderGetter | None) -> str:
        """The `ccb-hop` value to add to a call forwarded to another sidecar (`get` None: the
        call carries no learning header)."""
        material = hop_material(method, path, get)
        return self.trust.issue(self.service, self._wall(), material)

    def _inbound_material(self, method: str, path: str, get: HeaderGetter | None) -> str:
        """`hop_material(method, path, get)`, the last one remembered."""
        serving = optional = ""
        if get is not None:
            serving = get(SERVING_ENDPOINT_HEADER) or ""
            optional = get(OPTIONAL_HEADER) or ""
        last = self._material
        if (
            last[4]  # none made yet
            and last[1] == path
            and last[0] == method
            and last[2] == serving
            and last[3] == optional
        ):
            return last[4]
        material = _bound(method, path, serving, optional)
        self._material = (method, path, serving, optional, material)
        return material

    def _serving(self, get: HeaderGetter) -> tuple[Endpoint | None, EdgeSource, str | None]:
        named = get(SERVING_ENDPOINT_HEADER)
        if named:
            endpoint = self._named.get(named, _UNPARSED)
            if endpoint is _UNPARSED:
                endpoint = self._parse_serving(named)
                if len(self._named) >= _NAMED_CACHE:
                    self._named.clear()  # apps name few endpoints; this bounds a hostile one
                self._named[named] = endpoint
            if endpoint is not None:
                # The trace still carries the evidence of optionality when one is begun.
                learns = self.ledger is not None and self.learn_from_traces
                return endpoint, EdgeSource.HEADER, trace_key_of(get) if learns else None
        if self.learn_from_traces:
            key = trace_key_of(get)
            if key is not None:
                return self.traces.serving(key), EdgeSource.TRACE, key
        return None, EdgeSource.TRACE, None

    def _parse_serving(self, named: str) -> Endpoint | None:
        try:
            endpoint = Endpoint.parse(named.strip())
        except ValueError:
            return None
        # The app may only speak for its own service's endpoints.
        if endpoint.service != self.service:
            return None
        template = normalize_template(endpoint.template)
        return self.templates.endpoint(self.service, endpoint.method, template)
