"""Refusals the sidecar makes itself, marked so that a calling sidecar tells them from failures.

Every 503 a sidecar answers instead of an upstream (an OPEN or HALF_OPEN breaker, the cascade's
unavailable endpoint) carries `ccb-refusal: <reason code> <seal>`. A sidecar that receives such
a 503 from an upstream gives the breaker's permit back unrecorded: a refusal is not a failure of
the upstream (it is healthy; the cascade carries the cause). A forged mark must not hide real
failures, so the mark is sealed:

- towards the local app (refusals of our outbound listener): an HMAC under a key this process
  draws at start; our inbound listener re-seals such a refusal when the app relays it (any other
  `ccb-refusal` an app answers is stripped: an app can relay its own sidecar's refusals only);
- towards a calling sidecar: an HMAC under the mesh secret bound to the caller's `ccb-hop`
  token, or `-` without a secret; the caller honours a mark only when the seal verifies, or,
  without a secret, only from a loopback upstream (the trust rule of hop tokens).

Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING, Final

from cascadebreaker.cascade.trust import is_loopback
from cascadebreaker.sidecar.http.wire import RawHeaders

if TYPE_CHECKING:
    from cascadebreaker.sidecar.proxy.ports import RoutePort

__all__ = [
    "CIRCUIT_OPEN",
    "ENDPOINT_UNAVAILABLE",
    "FORCED_OPEN",
    "PROBE_BUDGET",
    "REFUSAL_HEADER",
    "UNSIGNED",
    "UPSTREAM_UNAVAILABLE",
    "find_refusal",
    "loopback_trust",
    "open_seal",
    "reason_of",
    "seal",
]

REFUSAL_HEADER: Final = b"ccb-refusal"
UNSIGNED: Final = "-"

# Reason codes (the first word of the header value).
CIRCUIT_OPEN: Final = "circuit_open"  # our breaker for the upstream is OPEN
PROBE_BUDGET: Final = "probe_budget"  # HALF_OPEN, every probe slot taken
FORCED_OPEN: Final = "forced_open"  # the breaker is forced open by an operator
ENDPOINT_UNAVAILABLE: Final = "endpoint_unavailable"  # the cascade: our own endpoint
UPSTREAM_UNAVAILABLE: Final = "upstream_unavailable"  # the cascade: the target endpoint

_MAC_CHARS = 32
_MAX_VALUE = 128  # a longer value is not ours


def _mac(key: bytes, code: str, binding: str) -> str:
    message = f"ccb-refusal|{code}|{binding}".encode("utf-8", "replace")
    return hmac.new(key, message, hashlib.sha256).hexdigest()[:_MAC_CHARS]


def seal(key: bytes | None, code: str, binding: str = "") -> bytes:
    """The header value for a refusal: `code mac` (or `code -` without a key)."""
    mark = UNSIGNED if key is None else _mac(key, code, binding)
    return f"{code} {mark}".encode("ascii")


def _split(value: bytes) -> tuple[str, str] | None:
    if len(value) > _MAX_VALUE:
        return None
    try:
        code, _, mark = value.decode("ascii").strip().partition(" ")
    except UnicodeDecodeError:
        return None
    if not code.isidentifier() or not mark or " " in mark:
        return None
    return code, mark


def reason_of(value: bytes) -> str | None:
    """The reason code of a well-formed mark, its seal unchecked (None when malformed)."""
    parts = _split(value)
    return None if parts is None else parts[0]


def open_seal(key: bytes, value: bytes, binding: str = "") -> str | None:
    """The reason code when `value` is sealed under `key` for `binding`; None otherwise."""
    parts = _split(value)
    if parts is None:
        return None
    code, mark = parts
    return code if hmac.compare_digest(mark, _mac(key, code, binding)) else None


def find_refusal(headers: RawHeaders) -> bytes | None:
    """The first `ccb-refusal` value among response headers, or None."""
    for name, value in headers:
        if len(name) == 11 and name.lower() == REFUSAL_HEADER:
            return value
    return None


def loopback_trust(route: RoutePort, state: object, value: bytes) -> bool:
    """The default trust without a mesh secret: a well-formed mark from a loopback upstream."""
    return reason_of(value) is not None and is_loopback(route.target.host)
