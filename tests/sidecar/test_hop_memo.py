"""The sidecar's remembered hop-token checks answer exactly as `HopTrust` does."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cascadebreaker.cascade import HopTrust
from cascadebreaker.sidecar.mesh.hop_memo import MemoHopTrust

_NOW = 1_800_000_000.0


@st.composite
def _checks(draw: st.DrawFn) -> list[tuple[int, str | None, str, float]]:
    """A run of checks: which token, from which peer, for which request line, when."""
    return draw(
        st.lists(
            st.tuples(
                st.integers(0, 3),
                st.sampled_from(["127.0.0.1", "10.0.0.1", "::1", None]),
                st.sampled_from(["GET /x||", "GET /y||", "POST /x||"]),
                st.sampled_from([0.0, 1.0, 59.0, 61.0, 120.0, -61.0]),
            ),
            max_size=12,
        )
    )


@given(_checks(), st.sampled_from([b"s", None]))
def test_remembered_checks_answer_as_fresh_ones(
    checks: list[tuple[int, str | None, str, float]], secret: bytes | None
) -> None:
    """Whatever came before (the last check remembered, the memo filled), each check is bound
    to its token, peer, request line and time like an unremembered one."""
    fresh = HopTrust(secret, max_skew=60)
    memo = MemoHopTrust(secret, max_skew=60, size=2)
    tokens = [
        fresh.issue("checkout", _NOW, "GET /x||"),
        fresh.issue("checkout", _NOW + 30, "GET /y||"),
        fresh.issue("cart", _NOW, "POST /x||"),
        "v1.checkout.1.forged",
    ]
    for which, peer, material, later in checks:
        token, now = tokens[which], _NOW + later
        expected = fresh.check(token, peer_host=peer, now=now, material=material)
        got = memo.check(token, peer_host=peer, now=now, material=material)
        assert (got.trusted, got.service) == (expected.trusted, expected.service)
