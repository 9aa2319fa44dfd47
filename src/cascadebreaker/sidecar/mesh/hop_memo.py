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
        # The last token that verified, with its peer and material: a caller's sidecar sends
        # one token a second per call line, so comparing three strings (no hashing of fresh
        # ones) answers most checks. The same entry as in `_trusted`, so the same answer.
        self._last_token = ""
        self._last_peer: str | None = None
        self._last_material = ""
        self._last_stamp = 0
        self._last_check: HopCheck | None = None

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
        last = self._last_check
        if (
            last is not None
            and token == self._last_token
            and material == self._last_material
            and peer_host == self._last_peer
            and abs(now - self._last_stamp) <= self._skew
        ):
            return last
        key = (token, peer_host, material)
        hit = self._trusted.get(key)
        if hit is not None and abs(now - hit[1]) <= self._skew:
            self._remember(token, peer_host, material, hit[0], hit[1])
            return hit[0]
        result = super().check(token, peer_host=peer_host, now=now, material=material)
        if result.trusted:
            if len(self._trusted) >= self._size:
                self._trusted.clear()
            stamp = int(token.split(".")[2])
            self._trusted[key] = (result, stamp)
            self._remember(token, peer_host, material, result, stamp)
        return result

    def _remember(
        self, token: str, peer_host: str | None, material: str, check: HopCheck, stamp: int
    ) -> None:
        self._last_token, self._last_peer, self._last_material = token, peer_host, material
        self._last_check, self._last_stamp = check, stamp
