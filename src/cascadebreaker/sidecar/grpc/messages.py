"""Conversions between the ccb.v1 protobuf messages and the sidecar's and cascade's own types.

Pure functions: endpoint validation (raising `BadArgument` with a message naming the field),
rejections and cause chains to `Rejection` / `Cause`, availability updates both ways. The
`Call` rpc's own request and reply skip message objects: call_codec.py.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from cascadebreaker.cascade.endpoints import Endpoint
from cascadebreaker.cascade.updates import AvailabilityUpdate, Cause, CauseChain
from cascadebreaker.contract import (
    CAUSE_CHAIN,
    CIRCUIT_STATE,
    REASON_CODE,
    RETRY_AFTER,
    State,
    parse_state,
    pick,
)
from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2 as pb

__all__ = [
    "FOREVER_MS",
    "REJECTION_METADATA",
    "UPSTREAM_ERROR_METADATA",
    "BadArgument",
    "cause_chain_to_proto",
    "circuit_state",
    "rejection_to_proto",
    "retry_after_ms",
    "update_from_proto",
    "update_to_proto",
    "validate_endpoint",
]

# Trailing metadata of a failed Call: the Rejection of a refused call, the kind of an upstream
# error (connect, timeout, reset, protocol).
REJECTION_METADATA = "ccb-rejection-bin"
UPSTREAM_ERROR_METADATA = "ccb-upstream-error"

# retry_after_ms for a circuit that only an operator can close (forced open).
FOREVER_MS = 2**64 - 1

# RFC 9110 tokens: methods such as M-SEARCH are legal.
_METHOD = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,32}$")
_BAD_PATH = re.compile(r"[\x00-\x20\x7f]")
_STATES: dict[State, pb.CircuitState] = {
    State.CLOSED: pb.CIRCUIT_STATE_CLOSED,
    State.OPEN: pb.CIRCUIT_STATE_OPEN,
    State.HALF_OPEN: pb.CIRCUIT_STATE_HALF_OPEN,
}


class BadArgument(ValueError):
    """A request field is malformed; the message names the field (INVALID_ARGUMENT)."""


def validate_endpoint(text: str, field: str = "endpoint") -> tuple[str, str]:
    """Split `METHOD /route` into (method, route); BadArgument naming `field` otherwise."""
    method, _, route = text.partition(" ")
    if not _METHOD.match(method) or not route.startswith("/") or _BAD_PATH.search(route):
        raise BadArgument(f"{field}: must be 'METHOD /route', got {text!r}")
    return method.upper(), route


def _wire_endpoint(service: str, text: str) -> Endpoint:
    """An endpoint as updates carry it, case kept (the signature covers it); `* *` allowed."""
    method, _, route = text.partition(" ")
    if method != "*" and not _METHOD.match(method):
        raise BadArgument(f"endpoint: must be 'METHOD /route', got {text!r}")
    if route != "*" and (not route.startswith("/") or _BAD_PATH.search(route)):
        raise BadArgument(f"endpoint: must be 'METHOD /route', got {text!r}")
    try:
        return Endpoint(service, method, route)
    except ValueError as exc:
        raise BadArgument(f"endpoint: {exc}") from exc


def circuit_state(state: Any) -> pb.CircuitState:
    """A core `State` (or any spelling of it) as the CircuitState enum number."""
    try:
        name = parse_state(getattr(state, "value", state))
    except ValueError:
        return pb.CIRCUIT_STATE_UNSPECIFIED
    return _STATES[name]


def retry_after_ms(seconds: float) -> int:
    """Seconds to whole milliseconds (rounded up); infinity (forced open) to FOREVER_MS."""
    if not math.isfinite(seconds):
        return FOREVER_MS
    return max(0, math.ceil(seconds * 1000))


def _cause_to_proto(endpoint: Endpoint, reason: str) -> Any:
    return pb.Cause(
        service=endpoint.service, endpoint=f"{endpoint.method} {endpoint.template}", reason=reason
    )


def cause_chain_to_proto(chain: CauseChain) -> list[Any]:
    """A cascade cause chain (root first) as `Cause` messages."""
    return [_cause_to_proto(c.endpoint, c.reason) for c in chain]


def _causes_from_json(items: Any) -> list[Any]:
    """Cause chain items of a JSON rejection body: `{endpoint: "svc METHOD /route", reason}`."""
    causes = []
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, Mapping):
            continue
        text, reason = str(item.get("endpoint", "")), str(item.get("reason", ""))
        try:
            endpoint = Endpoint.parse(text)
        except ValueError:
            causes.append(
                pb.Cause(service=str(item.get("service", "")), endpoint=text, reason=reason)
            )
            continue
        causes.append(_cause_to_proto(endpoint, reason))
    return causes


def rejection_to_proto(upstream: str, body: Mapping[str, Any], retry_after: float | None) -> Any:
    """A sidecar rejection (the JSON body of its 503) as a `Rejection` message."""
    chain = pick(body, CAUSE_CHAIN)
    if retry_after is None:  # null retryAfter: forced open, only an operator closes it
        retry = pick(body, RETRY_AFTER)
        seconds = float("inf") if retry is None else float(retry)
    else:
        seconds = retry_after
    return pb.Rejection(
        upstream=str(body.get("upstream") or upstream),
        circuit_state=circuit_state(pick(body, CIRCUIT_STATE, "")),
        retry_after_ms=retry_after_ms(seconds),
        cause_chain=_causes_from_json(chain),
        # A hook's body without a reasonCode refused by its own rule: a cascade refusal.
        reason=str(pick(body, REASON_CODE, "") or "cascade"),
    )


def update_to_proto(update: AvailabilityUpdate) -> Any:
    """A cascade availability update as its protobuf message (signature hex to raw bytes)."""
    return pb.AvailabilityUpdate(
        service=update.service,
        endpoint=f"{update.endpoint.method} {update.endpoint.template}",
        available=update.available,
        cause_chain=cause_chain_to_proto(update.cause_chain),
        expires_at_unix_ms=round(update.expires_at * 1000),
        version=update.version,
        signature=bytes.fromhex(update.signature) if update.signature else b"",
        instance=update.instance,
        reason=update.reason,
    )


def update_from_proto(message: Any) -> AvailabilityUpdate:
    """The protobuf message back to a cascade update; ValueError when an endpoint is malformed.

    The cascade's `verify` then checks the signature: the canonical form round-trips exactly
    because expiry travels as integer milliseconds.
    """
    chain = tuple(
        Cause(_wire_endpoint(cause.service, cause.endpoint), cause.reason)
        for cause in message.cause_chain
    )
    return AvailabilityUpdate(
        service=message.service,
        endpoint=_wire_endpoint(message.service, message.endpoint),
        available=message.available,
        cause_chain=chain,
        expires_at=message.expires_at_unix_ms / 1000,
        version=message.version,
        reason=message.reason,
        signature=message.signature.hex(),
        instance=message.instance,
    )
