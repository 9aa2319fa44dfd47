"""The vocabulary every part and every client shares: state names, reason codes, JSON keys.

Pure: this module imports nothing of the package, so the pure core may use it too. Names here
are a contract with dashboards, front ends and other languages: add, never rename.

    states     CLOSED, OPEN, HALF_OPEN                       (State)
    modes      NORMAL, FORCED_OPEN, DISABLED                 (Mode)
    scopes     local, shared                                 (Scope)
    reasons    consecutive_failures, failure_rate, ...       (Reason)
    JSON       camelCase keys; durations in seconds as floats (retryAfter)
    rejections one body for every 503 a breaker or the cascade answers (`rejection_body`)

Old spellings (`open`, `half-open`, `CIRCUIT_STATE_OPEN`, `cause_chain`, `retry_after`) are
read by `parse_state` and `pick`, never written. docs/contract.md is the page for people.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, Final

__all__ = [
    "CAUSE_CHAIN",
    "CIRCUIT_STATE",
    "EXPIRES_AT",
    "REASON_CODE",
    "RETRY_AFTER",
    "TRIPPED_BY",
    "Mode",
    "Reason",
    "Scope",
    "State",
    "degraded_reason",
    "json_seconds",
    "parse_state",
    "pick",
    "refusal_reason",
    "rejection_body",
    "whole_service",
]


class State(StrEnum):
    """Where a circuit is: CLOSED lets calls through, OPEN rejects them, HALF_OPEN probes."""

    CLOSED = "CLOSED"
    OPEN = "OPEN"
    HALF_OPEN = "HALF_OPEN"


class Mode(StrEnum):
    """Manual control of a breaker, overriding the policy."""

    NORMAL = "NORMAL"
    FORCED_OPEN = "FORCED_OPEN"  # reject everything until reset
    DISABLED = "DISABLED"  # always closed, nothing recorded


class Scope(StrEnum):
    """Whose state a breaker shows: its own process's, or the fleet's (a shared store)."""

    LOCAL = "local"  # this process alone (memory store, a replica that tripped alone, offline)
    SHARED = "shared"  # the state every process sharing the breaker sees


class Reason(StrEnum):
    """Stable codes for why a circuit moved, or why a call was refused or fell back."""

    CONSECUTIVE_FAILURES = "consecutive_failures"  # the consecutive-failures policy tripped
    FAILURE_RATE = "failure_rate"  # the failure-rate policy tripped
    SLOW_CALL_RATE = "slow_call_rate"  # the slow-call-rate policy tripped
    OPEN_WAIT_OVER = "open_wait_over"  # OPEN -> HALF_OPEN
    PROBE_FAILED = "probe_failed"  # half-open probes failed: back to OPEN
    PROBE_SLOW = "probe_slow"  # half-open probes were too slow: back to OPEN
    PROBES_SUCCEEDED = "probes_succeeded"  # half-open probes succeeded: CLOSED
    HALF_OPEN_TIMEOUT = "half_open_timeout"  # half-open outlived max_half_open_time
    PROBE_BUDGET = "probe_budget"  # refused: half-open, every probe slot is taken
    FORCED_OPEN = "forced_open"
    DISABLED = "disabled"
    RESET = "reset"
    CALL_FAILED = "call_failed"  # a fallback ran because the call itself failed
    # Why a call was refused or degraded, as rejections and degraded props name it.
    CIRCUIT_OPEN = "circuit_open"  # refused unrun: the breaker is OPEN (or its probes are busy)
    CASCADE = "cascade"  # refused unrun: a required dependency of the endpoint is unavailable
    UPSTREAM_ERROR = "upstream_error"  # the call ran and raised a failure
    FAILED_RESULT = "failed_result"  # the call returned a value the breaker counts as failed
    # Why an availability update says available again (besides open_wait_over, probes_succeeded
    # and reset of the root breaker).
    RECOVERED = "recovered"  # a dependency said available (an update without a reason)
    GRAPH_CHANGED = "graph_changed"  # the edge to the unavailable dependency aged out or changed


# JSON keys shared by several shapes (GuardedResult.to_dict, BreakerSnapshot.to_dict). Final:
# compiled code that reads them gets the string itself, not a module look-up.
CIRCUIT_STATE: Final = "circuitState"  # a State name
RETRY_AFTER: Final = "retryAfter"  # seconds (float) until calls are admitted; null: until reset
REASON_CODE: Final = "reasonCode"  # a Reason code
CAUSE_CHAIN: Final = "causeChain"  # [{endpoint: "service METHOD /route", reason}], root first
EXPIRES_AT: Final = "expiresAt"  # unix wall time (s) when an unavailability ends unless refreshed
TRIPPED_BY: Final = "trippedBy"  # the Reason code that opened the breaker (consecutive_failures)

_OLD_KEYS = {
    CIRCUIT_STATE: ("circuit_state", "state"),
    RETRY_AFTER: ("retry_after",),
    REASON_CODE: ("reason_code",),
    CAUSE_CHAIN: ("cause_chain",),
    EXPIRES_AT: ("expires_at",),
}


def parse_state(raw: object) -> State:
    """A state in any spelling a peer may send: `OPEN`, `open`, `half-open`, `CIRCUIT_STATE_OPEN`
    or the proto enum number (1 closed, 2 open, 3 half-open); ValueError otherwise."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        numbered = {1: State.CLOSED, 2: State.OPEN, 3: State.HALF_OPEN}
        if raw in numbered:
            return numbered[raw]
    elif isinstance(raw, str):
        name = raw.strip().upper().replace("-", "_").replace(" ", "_")
        name = name.removeprefix("CIRCUIT_STATE_")
        if name in State.__members__:
            return State[name]
    raise ValueError(f"not a circuit state: {raw!r}")


def pick(body: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """`body[key]`, else the value under one of its old spellings (`retry_after` for
    `retryAfter`...), else `default`: how every reader accepts old bodies."""
    if key in body:
        return body[key]
    for old in _OLD_KEYS.get(key, ()):
        if old in body:
            return body[old]
    return default


def json_seconds(seconds: float | None) -> float | None:
    """A duration as JSON carries it: seconds rounded to milliseconds, null for "never"."""
    if seconds is None or not math.isfinite(seconds):
        return None
    return round(max(seconds, 0.0), 3)


def refusal_reason(breaker_reason: str) -> Reason:
    """The reasonCode of a breaker's refusal, given why the breaker is open: `forced_open` and
    `probe_budget` keep their code, every other trip reason is `circuit_open` (the trip reason
    travels on as `trippedBy`)."""
    if breaker_reason in (Reason.FORCED_OPEN, Reason.PROBE_BUDGET):
        return Reason(breaker_reason)
    return Reason.CIRCUIT_OPEN


def degraded_reason(breaker_reason: str, *, ran: bool, raised: bool) -> Reason:
    """The reasonCode of a degraded result: a refusal's code when the call never ran, else
    `upstream_error` (it raised) or `failed_result` (it returned a value counted as failed)."""
    if not ran:
        return refusal_reason(breaker_reason)
    return Reason.UPSTREAM_ERROR if raised else Reason.FAILED_RESULT


def whole_service(name: str) -> str:
    """The endpoint text that stands for a whole service or breaker: `payment * *`."""
    return f"{name} * *"


def rejection_body(
    *,
    error: str,
    reason: str,
    state: State,
    retry_after: float | None,
    cause_chain: Sequence[Mapping[str, str]],
    **names: str,
) -> dict[str, Any]:
    """The JSON body of every rejection (library, ASGI, Django, httpx, sidecar HTTP):

        {"error": human text, "reasonCode": Reason code, "circuitState": State,
         "retryAfter": seconds | null, "causeChain": [{endpoint, reason}, ...], **names}

    `names` say what was refused: `upstream`, `endpoint`, `breaker`, `service`."""
    return {
        "error": error,
        REASON_CODE: str(reason),
        CIRCUIT_STATE: state.value,
        RETRY_AFTER: json_seconds(retry_after),
        CAUSE_CHAIN: [dict(link) for link in cause_chain],
        **names,
    }
