"""Who may steer learning: hop tokens that mark a request as coming from a sidecar.

A sidecar adds `ccb-hop: <token>` to every request it forwards to another sidecar. The
receiving sidecar honours learning headers (`ccb-serving-endpoint`, `ccb-optional`) on an inbound
request only when the token verifies, and strips them otherwise, so an outside client can
neither poison the graph nor smuggle the headers through the app.

- With a shared secret: the token is `v1.<service>.<unix seconds>.<hmac>`; the HMAC-SHA256 covers
  the service, the timestamp and caller-chosen `material` (the sidecar binds the method, path and
  learning header values, so a captured token cannot steer other requests); tokens older or
  newer than `max_skew` seconds are refused.
- Without a secret: the token is `v1.<service>.<unix seconds>.-` and is trusted only from a
  loopback peer (the embedded default, every process on one host). That is weak: any local
  process can claim to be a sidecar; the sidecar warns at start-up.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "HOP_HEADER",
    "OPTIONAL_HEADER",
    "SECRET_ENV",
    "SERVING_ENDPOINT_HEADER",
    "HopCheck",
    "HopTrust",
    "is_loopback",
    "load_secret",
]

SECRET_ENV = "CCB_SECRET"
HOP_HEADER: Final = "ccb-hop"
SERVING_ENDPOINT_HEADER: Final = "ccb-serving-endpoint"
OPTIONAL_HEADER: Final = "ccb-optional"

_VERSION = "v1"
_UNSIGNED = "-"
_MAC_CHARS = 32  # 128 bits of HMAC-SHA256 are plenty per hop and keep the header short


def load_secret(
    configured: str | None = None, env: Mapping[str, str] | None = None
) -> bytes | None:
    """The shared secret: the configured value, else `CCB_SECRET`, else None (unauthenticated)."""
    value = configured if configured else (env if env is not None else os.environ).get(SECRET_ENV)
    return value.encode() if value else None


def is_loopback(host: str | None) -> bool:
    """True for 127.0.0.0/8, ::1 and IPv4-mapped loopback; False for anything unparsable."""
    if not host:
        return False
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


@dataclass(frozen=True, slots=True)
class HopCheck:
    """The verdict on one `ccb-hop` token: trusted or not, the claimed service, and why."""

    trusted: bool
    service: str | None
    reason: str


class HopTrust:
    """Issue and verify `ccb-hop` tokens with the shared secret (or loopback-only without one)."""

    def __init__(self, secret: bytes | None, *, max_skew: float = 60.0) -> None:
        self._secret = secret
        self._max_skew = max_skew

    @property
    def authenticated(self) -> bool:
        """True when a secret is configured (tokens carry an HMAC)."""
        return self._secret is not None

    def issue(self, service: str, now: float, material: str = "") -> str:
        """A token for a request `service`'s sidecar forwards at wall time `now`."""
        if "." in service or not service:
            raise ValueError(f"service name {service!r} must be non-empty without '.'")
        stamp = str(int(now))
        return f"{_VERSION}.{service}.{stamp}.{self._mac(service, stamp, material)}"

    def check(
        self, token: str | None, *, peer_host: str | None, now: float, material: str = ""
    ) -> HopCheck:
        """Verify a token received from `peer_host` at wall time `now`."""
        if not token:
            return HopCheck(False, None, "no hop token")
        parts = token.strip().split(".")
        if len(parts) != 4 or parts[0] != _VERSION or not parts[1]:
            return HopCheck(False, None, "malformed hop token")
        _, service, stamp, mac = parts
        try:
            issued = int(stamp)
        except ValueError:
            return HopCheck(False, service, "malformed hop token")
        if self._secret is None:
            if mac != _UNSIGNED:
                return HopCheck(False, service, "signed token but no secret configured")
            if not is_loopback(peer_host):
                return HopCheck(False, service, "unsigned token from a non-loopback peer")
            return HopCheck(True, service, "loopback peer, no secret")
        if abs(now - issued) > self._max_skew:
            return HopCheck(False, service, "hop token too old or from the future")
        if not hmac.compare_digest(mac, self._mac(service, stamp, material)):
            return HopCheck(False, service, "bad hop signature")
        return HopCheck(True, service, "signed")

    def _mac(self, service: str, stamp: str, material: str) -> str:
        if self._secret is None:
            return _UNSIGNED
        message = f"ccb-hop|{_VERSION}|{service}|{stamp}|{material}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()[:_MAC_CHARS]
