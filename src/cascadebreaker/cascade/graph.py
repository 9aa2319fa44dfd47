"""The learned dependency graph: edges `caller endpoint -> callee endpoint`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum

from cascadebreaker.cascade.endpoints import Endpoint

__all__ = [
    "OPTIONALITY_LEARNED",
    "OPTIONALITY_MARKED",
    "OPTIONALITY_REQUIRED",
    "DependencyGraph",
    "Edge",
    "EdgeSource",
]


class EdgeSource(StrEnum):
    """How an edge was learned."""

    HEADER = "header"  # the app named the endpoint it serves (`ccb-serving-endpoint`)
    TRACE = "trace"  # trace context correlated inbound -> outbound
    CONFIG = "config"  # declared statically; never ages out


@dataclass(frozen=True, slots=True)
class Edge:
    """`caller`, while serving its endpoint, calls `callee`; `required` unless optional."""

    caller: Endpoint
    callee: Endpoint
    required: bool = True


class _Record:
    __slots__ = ("forced_optional", "last_seen", "learned_optional", "marked", "required", "source")

    def __init__(self, required: bool, source: EdgeSource, last_seen: float) -> None:
        self.required = required
        self.source = source
        self.last_seen = last_seen
        self.forced_optional = False  # config said optional: observations cannot undo it
        self.marked = not required  # the last call said optional (`ccb-optional`, a fallback)
        self.learned_optional = False  # evidence says the caller survives it (optionality.py)

    def recompute(self) -> bool:
        """Derive `required` from the marks; True when it changed."""
        required = not (self.marked or self.forced_optional or self.learned_optional)
        changed = required != self.required
        self.required = required
        return changed


OPTIONALITY_REQUIRED = "required"
OPTIONALITY_MARKED = "optional (marked)"
OPTIONALITY_LEARNED = "optional (learned)"


class DependencyGraph:
    """Edges learned from calls or declared by config; learned edges age out when unseen.

    `observe` is the per-request path: two dict lookups and a float store when the edge is known.
    """

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        edge_ttl: float = 600.0,
        max_edges: int = 50_000,
    ) -> None:
        if edge_ttl <= 0 or max_edges < 1:
            raise ValueError("edge_ttl must be > 0 and max_edges >= 1")
        self._clock = clock
        self._ttl = edge_ttl
        self._max_edges = max_edges
        self._out: dict[Endpoint, dict[Endpoint, _Record]] = {}
        self._in: dict[Endpoint, dict[Endpoint, _Record]] = {}
        self._callees_of_service: dict[str, set[Endpoint]] = {}
        self._count = 0
        self.dropped = 0  # observations refused because the graph was full

    def __len__(self) -> int:
        return self._count

    def observe(
        self,
        caller: Endpoint,
        callee: Endpoint,
        *,
        optional: bool = False,
        source: EdgeSource = EdgeSource.HEADER,
    ) -> bool:
        """Record one call; True when the edge is new or its required flag changed."""
        callees = self._out.get(caller)
        record = callees.get(callee) if callees is not None else None
        now = self._clock()
        if record is not None:
            record.last_seen = now
            if record.marked != optional:
                record.marked = optional
                return record.recompute()
            return False
        if self._count >= self._max_edges:
            self.dropped += 1
            return False
        self._insert(caller, callee, _Record(not optional, source, now))
        return True

    def declare(self, caller: Endpoint, callee: Endpoint, *, required: bool = True) -> None:
        """Declare a static edge (config); it never ages out and `required=False` sticks."""
        callees = self._out.get(caller)
        record = callees.get(callee) if callees is not None else None
        if record is None:
            record = _Record(required, EdgeSource.CONFIG, self._clock())
            self._insert(caller, callee, record)
        record.source = EdgeSource.CONFIG
        record.forced_optional = not required
        record.marked = False
        record.learned_optional = False  # config always wins over evidence
        record.required = required

    def mark_optional(self, caller: Endpoint, callee: Endpoint) -> bool:
        """Force an existing or future edge optional (config); True when it changed the edge."""
        callees = self._out.get(caller)
        record = callees.get(callee) if callees is not None else None
        if record is None:
            self.declare(caller, callee, required=False)
            return True
        changed = record.required
        record.required = False
        record.forced_optional = True
        return changed

    def set_learned_optional(self, caller: Endpoint, callee: Endpoint, optional: bool) -> bool:
        """Evidence made a learned edge optional (or required again); True when the edge's
        required flag changed. Static (config) edges and unknown edges are left alone."""
        record = self._out.get(caller, {}).get(callee)
        if record is None or record.source is EdgeSource.CONFIG:
            return False
        record.learned_optional = optional
        return record.recompute()

    def optionality(self, caller: Endpoint, callee: Endpoint) -> str | None:
        """`required`, `optional (marked)` (header or config) or `optional (learned)`."""
        record = self._out.get(caller, {}).get(callee)
        if record is None:
            return None
        if record.marked or record.forced_optional:
            return OPTIONALITY_MARKED
        if record.learned_optional:
            return OPTIONALITY_LEARNED
        return OPTIONALITY_REQUIRED

    def edge(self, caller: Endpoint, callee: Endpoint) -> Edge | None:
        """The edge between two endpoints, or None."""
        record = self._out.get(caller, {}).get(callee)
        return None if record is None else Edge(caller, callee, record.required)

    def edges(self) -> Iterator[Edge]:
        """Every edge."""
        for caller, callees in self._out.items():
            for callee, r in callees.items():
                yield Edge(caller, callee, r.required)

    def source(self, caller: Endpoint, callee: Endpoint) -> EdgeSource | None:
        """How the edge was learned, or None when absent."""
        record = self._out.get(caller, {}).get(callee)
        return None if record is None else record.source

    def dependencies(self, endpoint: Endpoint, *, required_only: bool = True) -> list[Endpoint]:
        """Direct callees of `endpoint` (required ones only by default)."""
        callees = self._out.get(endpoint)
        if not callees:
            return []
        return [c for c, r in callees.items() if r.required or not required_only]

    def callers(self, endpoint: Endpoint, *, required_only: bool = True) -> list[Endpoint]:
        """Direct callers of `endpoint` (over required edges by default)."""
        callers = self._in.get(endpoint)
        if not callers:
            return []
        return [c for c, r in callers.items() if r.required or not required_only]

    def callees_of_service(self, service: str) -> set[Endpoint]:
        """Every known callee endpoint of `service`."""
        return set(self._callees_of_service.get(service, ()))

    def dependents(self, endpoint: Endpoint, *, required_only: bool = True) -> set[Endpoint]:
        """Every endpoint that depends on `endpoint`, transitively (cycles are fine)."""
        seen: set[Endpoint] = set()
        stack = [endpoint]
        while stack:
            for caller in self.callers(stack.pop(), required_only=required_only):
                if caller not in seen:
                    seen.add(caller)
                    stack.append(caller)
        seen.discard(endpoint)
        return seen

    def endpoints(self) -> set[Endpoint]:
        """Every endpoint that appears on an edge."""
        return set(self._out) | set(self._in)

    def expire(self) -> list[Edge]:
        """Drop learned edges unseen for `edge_ttl`; return them. O(edges): call periodically."""
        cutoff = self._clock() - self._ttl
        stale = [
            Edge(caller, callee, r.required)
            for caller, callees in self._out.items()
            for callee, r in callees.items()
            if r.source is not EdgeSource.CONFIG and r.last_seen <= cutoff
        ]
        for e in stale:
            self._remove(e.caller, e.callee)
        return stale

    def load(self, edges: Iterable[Edge]) -> None:
        """Declare static edges in bulk (from config)."""
        for e in edges:
            self.declare(e.caller, e.callee, required=e.required)

    def _insert(self, caller: Endpoint, callee: Endpoint, record: _Record) -> None:
        self._out.setdefault(caller, {})[callee] = record
        self._in.setdefault(callee, {})[caller] = record
        self._callees_of_service.setdefault(callee.service, set()).add(callee)
        self._count += 1

    def _remove(self, caller: Endpoint, callee: Endpoint) -> None:
        callees = self._out[caller]
        del callees[callee]
        if not callees:
            del self._out[caller]
        callers = self._in[callee]
        del callers[caller]
        if not callers:
            del self._in[callee]
            of_service = self._callees_of_service[callee.service]
            of_service.discard(callee)
            if not of_service:
                del self._callees_of_service[callee.service]
        self._count -= 1
