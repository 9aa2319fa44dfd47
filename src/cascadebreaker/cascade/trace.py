"""Trace correlation: which endpoint was the app serving when it made this outbound call?

The sidecar records `trace key -> endpoint served` when it forwards an inbound request to its
app, and looks the key up when the app calls out. With W3C `traceparent` the app's outbound call
carries the same trace-id under a NEW span id, so the key is the trace-id alone.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from cascadebreaker.cascade.endpoints import Endpoint

__all__ = [
    "TRACE_HEADERS",
    "TraceContext",
    "TraceTable",
    "parse_b3",
    "parse_traceparent",
    "trace_context",
    "trace_key",
    "trace_key_of",
]

# Lower-case header names the extractor reads, in priority order.
TRACE_HEADERS = ("traceparent", "b3", "x-b3-traceid", "x-b3-spanid", "x-request-id")

_ZERO_TRACE: Final = "0" * 32
_MAX_REQUEST_ID: Final = 200


@dataclass(frozen=True, slots=True)
class TraceContext:
    """The part of a trace header the sidecar correlates on."""

    trace_id: str  # 32 lower-case hex chars (64-bit b3 ids are left-padded), or `rid:<id>`
    span_id: str | None

    @property
    def key(self) -> str:
        """The correlation key: the trace-id, never the span (it changes per hop)."""
        return self.trace_id


# One C-level match per header instead of a Python loop over fields.
_TRACEPARENT: Final = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_B3: Final = re.compile(r"([0-9a-f]{32}|[0-9a-f]{16})-([0-9a-f]{16})(?:-.*)?")
_B3_TRACE: Final = re.compile(r"[0-9a-f]{32}|[0-9a-f]{16}")
_ZERO_SPAN: Final = "0" * 16


def _traceparent_ids(value: str) -> tuple[str, str] | None:
    m = _TRACEPARENT.fullmatch(value.strip().lower())
    if m is None:
        return None
    version, trace_id, span_id, _, rest = m.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return None
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    return trace_id, span_id


def _b3_ids(value: str) -> tuple[str, str] | None:
    m = _B3.fullmatch(value.strip().lower())
    if m is None:
        return None  # also the sampling-only form ("0", "1", "d"), which carries no ids
    trace_id = m.group(1).rjust(32, "0")
    return None if trace_id == _ZERO_TRACE else (trace_id, m.group(2))


def _b3_trace_id(raw: str) -> str | None:
    raw = raw.strip().lower()
    if _B3_TRACE.fullmatch(raw) is None:
        return None
    padded = raw.rjust(32, "0")
    return None if padded == _ZERO_TRACE else padded


def _request_id(value: str) -> str | None:
    value = value.strip()
    return "rid:" + value if 0 < len(value) <= _MAX_REQUEST_ID else None


def parse_traceparent(value: str) -> TraceContext | None:
    """Parse W3C `traceparent` (`00-<trace-id>-<parent-id>-<flags>`); None when invalid."""
    ids = _traceparent_ids(value)
    return None if ids is None else TraceContext(*ids)


def parse_b3(value: str) -> TraceContext | None:
    """Parse the single `b3` header (`{trace}-{span}[-{sampled}[-{parent}]]`); None if absent."""
    ids = _b3_ids(value)
    return None if ids is None else TraceContext(*ids)


def trace_context(get: Callable[[str], str | None]) -> TraceContext | None:
    """Extract the correlation context; `get(name)` returns a lower-case header's value or None.

    Priority: `traceparent`, then single `b3`, then `x-b3-traceid`, then `x-request-id`.
    """
    value = get("traceparent")
    if value:
        ids = _traceparent_ids(value)
        if ids is not None:
            return TraceContext(*ids)
    value = get("b3")
    if value:
        ids = _b3_ids(value)
        if ids is not None:
            return TraceContext(*ids)
    value = get("x-b3-traceid")
    if value:
        trace_id = _b3_trace_id(value)
        if trace_id is not None:
            span = get("x-b3-spanid")
            return TraceContext(trace_id, span.strip().lower() if span else None)
    value = get("x-request-id")
    if value:
        rid = _request_id(value)
        if rid is not None:
            return TraceContext(rid, None)
    return None


def trace_key_of(get: Callable[[str], str | None]) -> str | None:
    """The correlation key only (the per-request path: no TraceContext is built)."""
    value = get("traceparent")
    if value:
        ids = _traceparent_ids(value)
        if ids is not None:
            return ids[0]
    value = get("b3")
    if value:
        ids = _b3_ids(value)
        if ids is not None:
            return ids[0]
    value = get("x-b3-traceid")
    if value:
        trace_id = _b3_trace_id(value)
        if trace_id is not None:
            return trace_id
    value = get("x-request-id")
    return _request_id(value) if value else None


def trace_key(headers: Mapping[str, str]) -> str | None:
    """The correlation key from a mapping with lower-case header names; None when none."""
    return trace_key_of(headers.get)


_MAX_FAILED: Final = 8  # failed callees remembered per trace (evidence of optionality)


class _Entry:
    __slots__ = ("endpoint", "expires", "failed", "inflight")

    def __init__(self, endpoint: Endpoint | None, expires: float) -> None:
        self.endpoint = endpoint  # None once two endpoints overlap on one key (ambiguous)
        self.expires = expires
        self.inflight = 1
        self.failed: list[Endpoint] | None = None  # callees whose call failed or was refused


class TraceTable:
    """Bounded TTL + LRU map `trace key -> endpoint being served`; every operation is O(1).

    Two overlapping inbound requests with one trace key but different endpoints make the key
    ambiguous until it expires: no edge is learned from it rather than a wrong one.
    """

    def __init__(
        self, clock: Callable[[], float], *, ttl: float = 30.0, capacity: int = 10_000
    ) -> None:
        if ttl <= 0 or capacity < 1:
            raise ValueError("ttl must be > 0 and capacity >= 1")
        self._clock = clock
        self._ttl = ttl
        self._capacity = capacity
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        # (endpoint served, callee) -> requests still in flight under which a call to the
        # callee failed: evidence of optionality not yet known (see `Learner.undecided`).
        self._unsettled: dict[tuple[Endpoint, Endpoint], int] = {}
        self.settled: set[Endpoint] = set()  # endpoints whose last such evidence landed

    def __len__(self) -> int:
        return len(self._entries)

    def begin(self, key: str, endpoint: Endpoint) -> None:
        """Record that an inbound request with `key` is being served as `endpoint`."""
        now = self._clock()
        entries = self._entries
        entry = entries.get(key)
        if entry is not None and entry.expires > now:
            if entry.inflight > 0 and entry.endpoint != endpoint:
                self._settle(entry)  # ambiguous: what it held is no evidence any more
                entry.endpoint = None
            elif entry.inflight == 0:
                entry.endpoint = endpoint
            entry.inflight += 1
            entry.expires = now + self._ttl
            entries.move_to_end(key)
            return
        if entry is not None:
            self._settle(entry)
        entries[key] = _Entry(endpoint, now + self._ttl)
        entries.move_to_end(key)
        self._evict(now)

    def end(self, key: str) -> tuple[Endpoint | None, list[Endpoint]]:
        """Mark one inbound request with `key` finished (its outbound calls may still follow);
        return the endpoint served and the callees that failed under it, once the last
        overlapping request ends (no endpoint when ambiguous)."""
        entry = self._entries.get(key)
        if entry is None or entry.inflight <= 0:
            return None, []
        entry.inflight -= 1
        failed = entry.failed
        if entry.inflight or not failed:
            return None, []
        self._settle(entry)
        return entry.endpoint, failed

    def callee_answered(self, key: str, callee: Endpoint) -> None:
        """A later call to `callee` under `key` succeeded (the app retried): what the endpoint
        answers says nothing about surviving that callee's failure."""
        entry = self._entries.get(key)
        if entry is not None and entry.failed and callee in entry.failed:
            entry.failed.remove(callee)
            if entry.endpoint is not None:
                self._unsettle(entry.endpoint, callee, -1)

    def callee_failed(self, key: str, callee: Endpoint) -> None:
        """A call made under `key` failed or was refused (bounded per trace)."""
        entry = self._entries.get(key)
        if entry is None or entry.endpoint is None or entry.inflight <= 0:
            return
        failed = entry.failed
        if failed is None:
            entry.failed = [callee]
        elif len(failed) < _MAX_FAILED and callee not in failed:
            failed.append(callee)
        else:
            return
        self._unsettle(entry.endpoint, callee, 1)

    def unsettled(self, endpoint: Endpoint, callee: Endpoint) -> bool:
        """True while a request for `endpoint` under which a call to `callee` failed has not
        answered yet."""
        return (endpoint, callee) in self._unsettled

    def sweep(self) -> None:
        """Drop expired entries (their evidence is settled: it will never land)."""
        self._evict(self._clock())

    def serving(self, key: str) -> Endpoint | None:
        """The endpoint served under `key`, or None when unknown, expired or ambiguous."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expires <= self._clock():
            del self._entries[key]
            self._settle(entry)
            return None
        return entry.endpoint

    def _evict(self, now: float) -> None:
        entries = self._entries
        while len(entries) > self._capacity:
            self._settle(entries.popitem(last=False)[1])
        # Entries are kept in refresh order, so expired ones sit at the front.
        while entries:
            first = next(iter(entries.values()))
            if first.expires > now:
                break
            entries.popitem(last=False)
            self._settle(first)

    def _settle(self, entry: _Entry) -> None:
        """The entry's failed calls are no longer in flight (answered, expired, ambiguous)."""
        failed, endpoint = entry.failed, entry.endpoint
        entry.failed = None
        if failed and endpoint is not None:
            for callee in failed:
                self._unsettle(endpoint, callee, -1)

    def _unsettle(self, endpoint: Endpoint, callee: Endpoint, delta: int) -> None:
        key = (endpoint, callee)
        count = self._unsettled.get(key, 0) + delta
        if count > 0:
            self._unsettled[key] = count
        else:
            self._unsettled.pop(key, None)
            self.settled.add(endpoint)
