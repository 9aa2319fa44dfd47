"""Availability updates: the message one sidecar sends about its own endpoints.

Wire form (JSON object, the same over gRPC, Redis pub/sub and HTTP):

    {"service": "checkout", "endpoint": "checkout POST /v1/orders", "available": false,
     "causeChain": [{"endpoint": "payment POST /v1/charges", "reason": "circuit_open"},
                    {"endpoint": "checkout POST /v1/orders", "reason": "requires payment ..."}],
     "expiresAt": 1764442586.123, "version": 1764442566123456, "instance": "checkout-7d9f-x2",
     "signature": "<hex>"}

`instance` names the replica (pod name or host:port) whose sidecar saw the change; it is left
out when empty, so an update from a sender that predates it reads as the one anonymous
instance of its service.

Keys are the contract's camelCase; the old `cause_chain` and `expires_at` are still read (and a
signature over the old canonical form still verifies), never written.

`expiresAt` is absolute unix wall time (seconds, millisecond precision): relays over several
hops and a Redis channel keep the root's single deadline instead of adding transit time per hop,
and a captured update cannot be replayed past it. Receivers clamp it to a maximum TTL so a host
with a skewed clock cannot pin an endpoint down for long. The HMAC covers `canonical_bytes`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from cascadebreaker.cascade.endpoints import Endpoint
from cascadebreaker.contract import CAUSE_CHAIN, EXPIRES_AT

__all__ = [
    "AvailabilityUpdate",
    "Cause",
    "CauseChain",
    "MalformedUpdate",
    "Verdict",
    "canonical_bytes",
    "chain_from_list",
    "chain_to_list",
    "sign",
    "verify",
    "verify_signature",
    "version_bound",
]

_FIELDS = frozenset(
    {
        "service",
        "endpoint",
        "available",
        CAUSE_CHAIN,
        EXPIRES_AT,
        "version",
        "reason",
        "instance",
        "signature",
    }
)
_OPTIONAL = frozenset({"reason", "instance", "signature"})
# A pod name (DNS label), a host name, or host:port (IPv6 in brackets).
_INSTANCE = re.compile(r"[A-Za-z0-9._:\[\]-]{1,253}")
# Old spellings, read for one release: new key -> old key.
_OLD_FIELDS = {CAUSE_CHAIN: "cause_chain", EXPIRES_AT: "expires_at"}
_MAX_CHAIN = 64
_MAX_REASON = 200
# The protobuf wire carries versions as uint64 and expiry as uint64 milliseconds: the JSON wire
# accepts no more, so every update decoded from one can be sent on the other.
_MAX_VERSION = 2**64 - 1
# Unix seconds, far past any real expiry: below it a float holds every millisecond exactly
# (2^53 ms is ~9e12 s), so an expiry reads back the same from either wire.
_MAX_EXPIRES_AT = 1e12
_SIGNATURE = re.compile(r"[0-9a-f]{64}")
# What both wires carry as an endpoint: `*` or an HTTP method token (RFC 9110), and `*` or a
# route starting with `/` without control characters or spaces.
_WIRE_METHOD = re.compile(r"\*|[!#$%&'*+.^_`|~0-9A-Za-z-]{1,32}")
_WIRE_TEMPLATE = re.compile(r"\*|/[^\x00-\x20\x7f]*")


@dataclass(frozen=True, slots=True)
class Cause:
    """One link of a cause chain: an unavailable endpoint and why."""

    endpoint: Endpoint
    reason: str

    def to_dict(self) -> dict[str, str]:
        """JSON-friendly form."""
        return {"endpoint": str(self.endpoint), "reason": self.reason}


CauseChain = tuple[Cause, ...]


def chain_to_list(chain: CauseChain) -> list[dict[str, str]]:
    """A cause chain as a JSON-friendly list, root first."""
    return [c.to_dict() for c in chain]


def chain_from_list(items: Any) -> CauseChain:
    """Parse a cause chain list; raises MalformedUpdate."""
    if not isinstance(items, list) or len(items) > _MAX_CHAIN:
        raise MalformedUpdate(f"causeChain must be a list of at most {_MAX_CHAIN} items")
    chain = []
    for item in items:
        if not isinstance(item, dict) or set(item) != {"endpoint", "reason"}:
            raise MalformedUpdate("causeChain items must be {endpoint, reason}")
        reason = item["reason"]
        if not isinstance(reason, str) or len(reason) > _MAX_REASON:
            raise MalformedUpdate("cause reason must be a string of at most 200 chars")
        if not _utf8(reason):
            raise MalformedUpdate("cause reason must be valid UTF-8 text")
        chain.append(Cause(_endpoint(item["endpoint"]), reason))
    return tuple(chain)


class MalformedUpdate(ValueError):
    """An update that does not follow the wire form."""


class Verdict(StrEnum):
    """What a receiver decided about an update; everything but ACCEPTED is a rejection."""

    ACCEPTED = "accepted"
    MALFORMED = "malformed"
    UNSIGNED = "unsigned"
    BAD_SIGNATURE = "bad_signature"
    EXPIRED = "expired"
    STALE = "stale"
    DUPLICATE = "duplicate"
    OWN_SERVICE = "own_service"  # about the receiver's own service: only its breakers decide
    FUTURE_VERSION = "future_version"  # a version past the receiver's clock + max_skew
    WRONG_PEER = "wrong_peer"  # a Watch peer spoke for another service than its own


def version_bound(now: float, max_skew: float) -> int:
    """The highest version a receiver accepts at wall time `now`: versions are the sender's
    clock in microseconds, so one further ahead than `max_skew` seconds is forged or broken."""
    return int((now + max_skew) * 1_000_000)


@dataclass(frozen=True, slots=True)
class AvailabilityUpdate:
    """A change of availability of one endpoint of the sending service."""

    service: str
    endpoint: Endpoint
    available: bool
    cause_chain: CauseChain
    expires_at: float
    version: int
    # Why it was sent, a Reason code: the root's (circuit_open...) when unavailable; what ended
    # it (open_wait_over, probes_succeeded, reset, recovered, graph_changed) when available.
    reason: str = ""
    signature: str = field(default="", compare=False)
    instance: str = ""  # the replica that saw it; "" = the anonymous instance (older senders)

    def problem(self) -> str | None:
        """Why this update breaks the rules, or None when it is well formed."""
        if self.service != self.endpoint.service:
            return "service does not own the endpoint"
        if self.version < 0:
            return "negative version"
        if self.version > _MAX_VERSION:
            return "version must be below 2^64"
        if not self.expires_at > 0:  # NaN too
            return "expiresAt must be positive unix time"
        if not self.expires_at < _MAX_EXPIRES_AT:
            return f"expiresAt must be below {_MAX_EXPIRES_AT:g}"
        if self.instance and not _INSTANCE.fullmatch(self.instance):
            return "instance must be 1-253 chars of letters, digits and . _ : - [ ]"
        if self.signature and not _SIGNATURE.fullmatch(self.signature):
            return "signature must be 64 lowercase hex digits (or empty)"
        if len(self.cause_chain) > _MAX_CHAIN:
            return f"the cause chain is longer than {_MAX_CHAIN}"
        if any(len(reason) > _MAX_REASON for reason in (self.reason, *self._reasons())):
            return f"a cause reason is longer than {_MAX_REASON} chars"
        texts = (self.service, str(self.endpoint), self.reason, *self._reasons())
        if not all(map(_utf8, texts)):
            return "text must be valid UTF-8"
        for endpoint in (self.endpoint, *(cause.endpoint for cause in self.cause_chain)):
            if not (
                _WIRE_METHOD.fullmatch(endpoint.method)
                and _WIRE_TEMPLATE.fullmatch(endpoint.template)
            ):
                return f"{endpoint} is not 'service METHOD /route' (or 'service * *')"
        if self.available and self.cause_chain:
            return "an available endpoint has no cause chain"
        if not self.available:
            if not self.cause_chain:
                return "an unavailable endpoint needs a cause chain"
            if self.cause_chain[-1].endpoint != self.endpoint:
                return "the cause chain must end with the endpoint itself"
            if len({c.endpoint for c in self.cause_chain}) != len(self.cause_chain):
                return "the cause chain repeats an endpoint"
        return None

    def _reasons(self) -> list[str]:
        return [cause.reason for cause in self.cause_chain]

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (the wire form; `instance` only when there is one)."""
        data: dict[str, Any] = {
            "service": self.service,
            "endpoint": str(self.endpoint),
            "available": self.available,
            CAUSE_CHAIN: chain_to_list(self.cause_chain),
            EXPIRES_AT: self.expires_at,
            "version": self.version,
        }
        if self.reason:
            data["reason"] = self.reason
        if self.instance:
            data["instance"] = self.instance
        data["signature"] = self.signature
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AvailabilityUpdate:
        """Parse the wire form; raises MalformedUpdate with the reason."""
        if not isinstance(data, Mapping):
            raise MalformedUpdate("update must be an object")
        data = _new_spelling(data)
        missing = (_FIELDS - _OPTIONAL) - set(data)
        if missing:
            raise MalformedUpdate(f"missing fields: {sorted(missing)}")
        unknown = set(data) - _FIELDS
        if unknown:
            raise MalformedUpdate(f"unknown fields: {sorted(unknown)}")
        service, available = data["service"], data["available"]
        expires_at, version = data[EXPIRES_AT], data["version"]
        signature = data.get("signature", "")
        instance = data.get("instance", "")
        reason = data.get("reason", "")
        if not isinstance(reason, str):
            raise MalformedUpdate("reason must be a string")
        if not isinstance(service, str) or not isinstance(available, bool):
            raise MalformedUpdate("service must be a string and available a boolean")
        if isinstance(version, bool) or not isinstance(version, int):
            raise MalformedUpdate("version must be an integer")
        if version > _MAX_VERSION:
            raise MalformedUpdate("version must be below 2^64")
        if isinstance(expires_at, bool) or not isinstance(expires_at, int | float):
            raise MalformedUpdate("expiresAt must be a number")
        if isinstance(expires_at, int) and expires_at >= _MAX_EXPIRES_AT:
            raise MalformedUpdate(f"expiresAt must be below {_MAX_EXPIRES_AT:g}")  # no float()
        if not math.isfinite(expires_at):  # JSON allows NaN and Infinity
            raise MalformedUpdate("expiresAt must be a finite number")
        if not isinstance(signature, str):
            raise MalformedUpdate("signature must be a string")
        if not isinstance(instance, str):
            raise MalformedUpdate("instance must be a string")
        if not _utf8(service):
            raise MalformedUpdate("service must be valid UTF-8 text")
        update = cls(
            service=service,
            endpoint=_endpoint(data["endpoint"]),
            available=available,
            cause_chain=chain_from_list(data[CAUSE_CHAIN]),
            expires_at=_ms(float(expires_at)),
            version=version,
            reason=reason,
            signature=signature,
            instance=instance,
        )
        problem = update.problem()
        if problem is not None:
            raise MalformedUpdate(problem)
        return update

    def to_json(self) -> bytes:
        """The wire form as compact JSON bytes."""
        return json.dumps(self.to_dict(), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes | str) -> AvailabilityUpdate:
        """Parse JSON bytes; raises MalformedUpdate."""
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise MalformedUpdate(f"not JSON: {exc}") from exc
        return cls.from_dict(data)


def _new_spelling(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """`data` with old keys (`cause_chain`, `expires_at`) renamed; both spellings of one key
    at once are malformed (which one would the signature cover?)."""
    old = [key for key in _OLD_FIELDS.values() if key in data]
    if not old:
        return data
    renamed = dict(data)
    for new, key in _OLD_FIELDS.items():
        if key in renamed:
            if new in renamed:
                raise MalformedUpdate(f"both {new} and its old spelling {key}")
            renamed[new] = renamed.pop(key)
    return renamed


def _utf8(text: str) -> bool:
    """True when `text` encodes as UTF-8 (JSON escapes can smuggle in lone surrogates)."""
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _endpoint(value: Any) -> Endpoint:
    if not isinstance(value, str):
        raise MalformedUpdate("endpoint must be a string")
    if not _utf8(value):
        raise MalformedUpdate("endpoint must be valid UTF-8 text")
    try:
        return Endpoint.parse(value)
    except ValueError as exc:
        raise MalformedUpdate(str(exc)) from exc


def _ms(t: float) -> float:
    return round(t * 1000) / 1000


def canonical_bytes(update: AvailabilityUpdate, *, legacy: bool = False) -> bytes:
    """The bytes the HMAC covers (docs/contract.md): the wire form without `signature`, keys
    sorted by code point, no spaces, UTF-8 (no escapes but the ones JSON requires), with
    `expiresAt` as integer milliseconds so any language reproduces it exactly. `reason` and
    `instance` are covered when present (nobody can move a replica's report to another), and
    left out when empty. `legacy`: the form
    before the contract (`cause_chain`, `expires_at`), still accepted by `verify`."""
    body = update.to_dict()
    del body["signature"]
    body[EXPIRES_AT] = round(update.expires_at * 1000)
    if legacy:  # before the contract: snake_case keys (and no reason)
        body.pop("reason", None)
        for new, old in _OLD_FIELDS.items():
            body[old] = body.pop(new)
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _mac(update: AvailabilityUpdate, secret: bytes, legacy: bool = False) -> str:
    return hmac.new(secret, canonical_bytes(update, legacy=legacy), hashlib.sha256).hexdigest()


def sign(update: AvailabilityUpdate, secret: bytes) -> AvailabilityUpdate:
    """Return `update` with `expires_at` rounded to milliseconds and its HMAC-SHA256 (hex) set."""
    rounded = _ms(update.expires_at)
    if rounded != update.expires_at:
        update = replace(update, expires_at=rounded)
    return replace(update, signature=_mac(update, secret))  # the MAC never covers `signature`


def verify_signature(update: AvailabilityUpdate, secret: bytes | None) -> Verdict:
    """Check the HMAC only: ACCEPTED, UNSIGNED or BAD_SIGNATURE (no secret: always ACCEPTED)."""
    if secret is None:
        return Verdict.ACCEPTED
    if not update.signature:
        return Verdict.UNSIGNED
    if not _SIGNATURE.fullmatch(update.signature):  # compare_digest refuses non-ASCII text
        return Verdict.BAD_SIGNATURE
    if hmac.compare_digest(update.signature, _mac(update, secret)):
        return Verdict.ACCEPTED
    # A sender from before the contract signed the old form, which had no reason (accepted for
    # one release; a reason added in transit would not be covered, so none is allowed).
    if update.reason or not hmac.compare_digest(update.signature, _mac(update, secret, True)):
        return Verdict.BAD_SIGNATURE
    return Verdict.ACCEPTED


def verify(
    update: AvailabilityUpdate,
    secret: bytes | None,
    *,
    now: float,
    last_version: int | None = None,
    receiver: str | None = None,
    max_skew: float | None = None,
) -> Verdict:
    """Decide whether `receiver` accepts `update` at wall time `now` given the last version
    seen for its endpoint: malformed, about the receiver's own service, signature, expiry,
    a version past `now + max_skew`, then version order."""
    if update.problem() is not None:
        return Verdict.MALFORMED
    if receiver is not None and update.service == receiver:
        return Verdict.OWN_SERVICE
    verdict = verify_signature(update, secret)
    if verdict is not Verdict.ACCEPTED:
        return verdict
    if update.expires_at <= now:
        return Verdict.EXPIRED
    if max_skew is not None and update.version > version_bound(now, max_skew):
        return Verdict.FUTURE_VERSION
    if last_version is not None:
        if update.version < last_version:
            return Verdict.STALE
        if update.version == last_version:
            return Verdict.DUPLICATE
    return Verdict.ACCEPTED
