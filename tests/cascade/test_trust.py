"""Hop tokens: only sidecars may steer learning."""

from __future__ import annotations

import pytest

from cascadebreaker.cascade import HopTrust, is_loopback, load_secret

NOW = 1_764_000_000.0


def test_signed_token_verifies_from_any_peer() -> None:
    trust = HopTrust(b"k")
    token = trust.issue("checkout", NOW, "POST /v1/orders||")
    check = trust.check(token, peer_host="10.0.0.7", now=NOW + 5, material="POST /v1/orders||")
    assert (check.trusted, check.service, check.reason) == (True, "checkout", "signed")
    assert trust.authenticated


@pytest.mark.parametrize(
    ("token_material", "check_material", "secret", "dt", "reason"),
    [
        ("GET /a", "GET /b", b"k", 0, "bad hop signature"),
        ("GET /a", "GET /a", b"other", 0, "bad hop signature"),
        ("GET /a", "GET /a", b"k", 61, "too old"),
        ("GET /a", "GET /a", b"k", -61, "from the future"),
    ],
)
def test_signed_token_failures(
    token_material: str, check_material: str, secret: bytes, dt: float, reason: str
) -> None:
    token = HopTrust(b"k").issue("checkout", NOW, token_material)
    check = HopTrust(secret).check(
        token, peer_host="127.0.0.1", now=NOW + dt, material=check_material
    )
    assert not check.trusted
    assert reason in check.reason


@pytest.mark.parametrize(
    "token", [None, "", "v1", "v2.checkout.1.-", "v1..1.-", "v1.checkout.soon.-", "a.b.c.d.e"]
)
def test_malformed_tokens_are_not_trusted(token: str | None) -> None:
    check = HopTrust(b"k").check(token, peer_host="127.0.0.1", now=NOW)
    assert not check.trusted


def test_without_secret_only_loopback_peers_are_trusted() -> None:
    trust = HopTrust(None)
    token = trust.issue("checkout", NOW)
    assert token.endswith(".-")
    assert trust.check(token, peer_host="127.0.0.1", now=NOW).trusted
    assert trust.check(token, peer_host="::1", now=NOW).trusted
    assert not trust.check(token, peer_host="192.168.1.4", now=NOW).trusted
    assert not trust.check(token, peer_host=None, now=NOW).trusted


def test_signed_token_is_refused_by_a_sidecar_without_secret() -> None:
    token = HopTrust(b"k").issue("checkout", NOW)
    check = HopTrust(None).check(token, peer_host="127.0.0.1", now=NOW)
    assert not check.trusted
    assert "no secret" in check.reason


def test_unsigned_token_is_refused_by_a_sidecar_with_secret() -> None:
    token = HopTrust(None).issue("checkout", NOW)
    assert not HopTrust(b"k").check(token, peer_host="127.0.0.1", now=NOW).trusted


@pytest.mark.parametrize("service", ["", "a.b"])
def test_service_names_with_dots_cannot_issue(service: str) -> None:
    with pytest.raises(ValueError, match="service name"):
        HopTrust(b"k").issue(service, NOW)


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1", True),
        ("127.3.4.5", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("fe80::1%eth0", False),
        ("10.0.0.1", False),
        ("localhost", False),  # names are not resolved: peers are addresses
        ("", False),
        (None, False),
    ],
)
def test_is_loopback(host: str | None, expected: bool) -> None:
    assert is_loopback(host) is expected


def test_load_secret_prefers_config_then_env() -> None:
    assert load_secret("from-config", {"CCB_SECRET": "from-env"}) == b"from-config"
    assert load_secret(None, {"CCB_SECRET": "from-env"}) == b"from-env"
    assert load_secret(None, {}) is None
    assert load_secret("", {"CCB_SECRET": ""}) is None
