"""Hop tokens remembered: the same request line from the same app within one second is common.

Issuing and verifying a `ccb-hop` token is an HMAC each (and without a secret, an address parse);
both are pure functions of their inputs, so the sidecar keeps the recent results.
"""

from __future__ import annotations

from cascadebreaker.cascade import HopTrust
from cascadebreaker.cascade.trust import HopCheck

__all__ = ["MemoHopTrust"]


class MemoHopTrust(HopTrust):
    """`HopTrust` with bounded memos of issued tokens and of tokens that verified."""

    def __init__(self, secret: bytes | None, *, max_skew: float = 60.0, size: int = 4096) -> None:
        super().__init__(secret, max_skew=max_skew)
        self._skew = max_skew
        self._size = size
        self._issued: dict[tuple[str, int, str], str] = {}
        self._trusted: dict[tuple[str, str | None, str], tuple[HopCheck, int]] = {}

    def issue(self, service: str, now: float, material: str = "") -> str:
        """As `HopTrust.issue`, once per service, second and material."""
        key = (service, int(now), material)
        token = self._issued.get(key)
        if token is None:
            if len(self._issued) >= self._size:
                self._issued.clear()  # one second's worth at most matters
            token = self._issued[key] = super().issue(service, now, material)
        return token

    def check(
        self, token: str | None, *, peer_host: str | None, now: float, material: str = ""
    ) -> HopCheck:
        """As `HopTrust.check`; a token that verified is trusted again while it is fresh."""
        if not token:
            return super().check(token, peer_host=peer_host, now=now, material=material)
        key = (token, peer_host, material)
        hit = self._trusted.get(key)
        if hit is not None and abs(now - hit[1]) <= self._skew:
            return hit[0]
        result = super().check(token, peer_host=peer_host, now=now, material=material)
        if result.trusted:
            if len(self._trusted) >= self._size:
                self._trusted.clear()
            self._trusted[key] = (result, int(token.split(".")[2]))
        return result
