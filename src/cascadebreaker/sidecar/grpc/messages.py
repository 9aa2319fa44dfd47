"""Conversions between the ccb.v1 protobuf messages and the sidecar's and cascade's own types.

Pure functions: request validation (raising `BadArgument` with a message naming the field),
rejections and cause chains to `Rejection` / `Cause`, availability updates both ways.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:  # the gRPC client imports this module: it loads nothing of the proxy
    from cascadebreaker.sidecar.http.wire import RawHeaders

__all__ = [
    "FOREVER_MS",
    "REJECTION_METADATA",
    "UPSTREAM_ERROR_METADATA",
    "BadArgument",
    "cause_chain_to_proto",
    "circuit_state",
    "encode_call_response",
    "headers_to_proto",
    "rejection_to_proto",
    "retry_after_ms",
    "update_from_proto",
    "update_to_proto",
    "validate_call",
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
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$")
_BAD_VALUE = re.compile(r"[\x00\r\n]")
_BAD_PATH = re.compile(r"[\x00-\x20\x7f]")
_MAX_PATH = 8192
_MAX_HEADERS = 100
# Methods as most calls spell them, already as bytes (no regex, no encoding per call).
_COMMON_METHODS = {
    spelling: name.encode()
    for name in ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
    for spelling in (name, name.lower())
}
_STATES: dict[State, pb.CircuitState] = {
    State.CLOSED: pb.CIRCUIT_STATE_CLOSED,
    State.OPEN: pb.CIRCUIT_STATE_OPEN,
    State.HALF_OPEN: pb.CIRCUIT_STATE_HALF_OPEN,
}


class BadArgument(ValueError):
    """A request field is malformed; the message names the field (INVALID_ARGUMENT)."""


def validate_call(request: Any) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """Check a CallRequest; return its method (default GET, upper-cased) and headers as the
    wire has them (latin-1 bytes)."""
    if not request.upstream:
        raise BadArgument("upstream: required")
    method = request.method
    if not method:
        method_b = b"GET"
    elif method in _COMMON_METHODS:
        method_b = _COMMON_METHODS[method]
    elif _METHOD.match(method):
        method_b = method.upper().encode("ascii")
    else:
        raise BadArgument(f"method: {method!r} is not an HTTP method")
    path = request.path
    if not path.startswith("/") or len(path) > _MAX_PATH or _BAD_PATH.search(path):
        raise BadArgument("path: must start with '/' and hold no spaces or control characters")
    headers: list[tuple[bytes, bytes]] = []
    given = request.headers
    if given:
        if len(given) > _MAX_HEADERS:
            raise BadArgument(f"headers: at most {_MAX_HEADERS}")
        for header in given:
            name, value = header.name, header.value
            if not _TOKEN.match(name):
                raise BadArgument(f"headers: {name!r} is not a header name")
            if _BAD_VALUE.search(value) or not (value.isascii() or _latin1(value)):
                raise BadArgument(f"headers: the value of {name!r} is not a header value")
            headers.append((name.encode("ascii"), value.encode("latin-1")))
    serving = request.serving_endpoint
    if serving:
        validate_endpoint(serving, "serving_endpoint")
        if not (serving.isascii() or _latin1(serving)):  # it travels as a header value
            raise BadArgument(f"serving_endpoint: {serving!r} is not a header value (latin-1)")
    return method_b, headers


def _latin1(value: str) -> bool:
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


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


def headers_to_proto(headers: Iterable[tuple[str, str]]) -> list[Any]:
    """Header pairs as `Header` messages, order and duplicates kept."""
    return [pb.Header(name=name, value=value) for name, value in headers]


def encode_call_response(status: int, headers: RawHeaders, body: bytes) -> bytes:
    """A `CallResponse` serialized, straight from the upstream's raw response.

    What `CallResponse(status, headers=[Header(name.lower(), value)], body)` serializes to,
    byte for byte (tests/sidecar_grpc/test_messages.py), without building a message object
    per header: names lower-cased, latin-1 text as UTF-8, fields in number order, defaults
    (0, empty) left out.
    """
    parts = [_STATUS_FIELDS.get(status) or (b"\x08" + _varint(status) if status else b"")]
    append = parts.append
    for name, value in headers:
        size_name, size_value = len(name), len(value)
        # The common header: ASCII, short, neither part empty (one format, one append).
        if (
            size_name
            and size_value
            and size_name + size_value < 124
            and name.isascii()
            and value.isascii()
        ):
            append(
                b"\x12%c\x0a%c%s\x12%c%s"
                % (size_name + size_value + 4, size_name, name.lower(), size_value, value)
            )
            continue
        append(_header_field(name, value))
    size = len(body)
    if size:
        append(b"\x1a%c" % size if size < 128 else b"\x1a" + _varint(size))
        append(body)
    return b"".join(parts)


def _header_field(name: bytes, value: bytes) -> bytes:
    """A `Header` as field 2 of `CallResponse`, any length or text (latin-1 as UTF-8)."""
    name = name.lower() if name.isascii() else name.decode("latin-1").lower().encode()
    if not value.isascii():
        value = value.decode("latin-1").encode()
    header = _field(0x0A, name) + _field(0x12, value)
    return b"\x12" + _varint(len(header)) + header


def _field(tag: int, data: bytes) -> bytes:
    """A length-delimited field; nothing for empty data (proto3 leaves defaults out)."""
    return bytes((tag,)) + _varint(len(data)) + data if data else b""


def _varint(number: int) -> bytes:
    """A protobuf base-128 varint (non-negative numbers)."""
    if number < 128:
        return bytes((number,))
    out = bytearray()
    while number >= 128:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


# `status = n` as field 1, made once for every HTTP status.
_STATUS_FIELDS = {status: b"\x08" + _varint(status) for status in range(100, 1000)}
