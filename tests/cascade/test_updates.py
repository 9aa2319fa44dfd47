"""Availability updates: wire form, canonical bytes, signatures, verdicts."""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cascadebreaker.cascade import (
    AvailabilityUpdate,
    Cause,
    MalformedUpdate,
    Verdict,
    canonical_bytes,
    sign,
    verify,
    verify_signature,
)

from .helpers import ep

SECRET = b"s3cret"
NOW = 1_764_000_000.0
ROOT = ep("payment POST /v1/charges")
SELF = ep("checkout POST /v1/orders")


def down(version: int = 7, expires_at: float = NOW + 20) -> AvailabilityUpdate:
    chain = (Cause(ROOT, "circuit open"), Cause(SELF, f"requires {ROOT}"))
    return AvailabilityUpdate("checkout", SELF, False, chain, expires_at, version)


def test_dict_and_json_round_trip() -> None:
    update = sign(down(), SECRET)
    assert AvailabilityUpdate.from_dict(update.to_dict()) == update
    again = AvailabilityUpdate.from_json(update.to_json())
    assert again.signature == update.signature
    assert verify(again, SECRET, now=NOW) is Verdict.ACCEPTED


def test_wire_form_names_every_field() -> None:
    data = down().to_dict()
    assert data["endpoint"] == "checkout POST /v1/orders"
    assert data["causeChain"][0] == {"endpoint": str(ROOT), "reason": "circuit open"}
    assert set(data) == {
        "service",
        "endpoint",
        "available",
        "causeChain",
        "expiresAt",
        "version",
        "signature",
    }
    reasoned = replace(down(), reason="circuit_open", instance="checkout-1").to_dict()
    assert (reasoned["reason"], reasoned["instance"]) == ("circuit_open", "checkout-1")


def test_the_old_spelling_is_read_and_never_written() -> None:
    update = sign(down(), SECRET)
    old = update.to_dict()
    old["cause_chain"], old["expires_at"] = old.pop("causeChain"), old.pop("expiresAt")
    again = AvailabilityUpdate.from_dict(old)
    assert again == update and again.signature == update.signature
    assert "cause_chain" not in again.to_dict() and b"expires_at" not in again.to_json()


def test_both_spellings_of_one_field_are_malformed() -> None:
    data = down().to_dict()
    data["cause_chain"] = data["causeChain"]
    with pytest.raises(MalformedUpdate, match="causeChain and its old spelling cause_chain"):
        AvailabilityUpdate.from_dict(data)


def test_a_signature_over_the_old_canonical_form_still_verifies() -> None:
    update = down()
    legacy_mac = hmac.new(SECRET, canonical_bytes(update, legacy=True), hashlib.sha256)
    signed_before = replace(update, signature=legacy_mac.hexdigest())
    assert verify(signed_before, SECRET, now=NOW) is Verdict.ACCEPTED
    assert canonical_bytes(update, legacy=True).startswith(b'{"available":false,"cause_chain":')


def test_canonical_bytes_are_sorted_compact_and_exclude_the_signature() -> None:
    update = sign(down(expires_at=NOW + 20.0004), SECRET)
    # A golden value: another language must reproduce these bytes exactly to sign/verify.
    assert canonical_bytes(update) == (
        b'{"available":false,"causeChain":['
        b'{"endpoint":"payment POST /v1/charges","reason":"circuit open"},'
        b'{"endpoint":"checkout POST /v1/orders","reason":"requires payment POST /v1/charges"}],'
        b'"endpoint":"checkout POST /v1/orders","expiresAt":1764000020000,'
        b'"service":"checkout","version":7}'
    )


def test_signature_is_hmac_sha256_of_the_canonical_bytes() -> None:
    update = sign(down(), SECRET)
    expected = hmac.new(SECRET, canonical_bytes(update), hashlib.sha256).hexdigest()
    assert update.signature == expected


def test_signature_verifies_and_detects_tampering() -> None:
    update = sign(down(), SECRET)
    assert verify(update, SECRET, now=NOW) is Verdict.ACCEPTED
    tampered = AvailabilityUpdate.from_dict({**update.to_dict(), "expiresAt": NOW + 999})
    assert verify(tampered, SECRET, now=NOW) is Verdict.BAD_SIGNATURE
    assert verify(update, b"other secret", now=NOW) is Verdict.BAD_SIGNATURE


def test_unsigned_update_is_refused_when_a_secret_is_configured() -> None:
    assert verify(down(), SECRET, now=NOW) is Verdict.UNSIGNED
    assert verify(down(), None, now=NOW) is Verdict.ACCEPTED


def test_expired_stale_and_duplicate() -> None:
    update = sign(down(version=7), SECRET)
    assert verify(update, SECRET, now=NOW + 20) is Verdict.EXPIRED
    assert verify(update, SECRET, now=NOW, last_version=8) is Verdict.STALE
    assert verify(update, SECRET, now=NOW, last_version=7) is Verdict.DUPLICATE
    assert verify(update, SECRET, now=NOW, last_version=6) is Verdict.ACCEPTED


def test_problem_checks_run_before_the_signature() -> None:
    bad = AvailabilityUpdate("payment", SELF, False, down().cause_chain, NOW + 1, 1)
    assert verify(sign(bad, SECRET), SECRET, now=NOW) is Verdict.MALFORMED


_NEW = {"cause_chain": "causeChain", "expires_at": "expiresAt"}


def _wire(**changes: Any) -> dict[str, Any]:
    data = down().to_dict()
    data.update({_NEW.get(k, k): v for k, v in changes.items()})
    return data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({k: v for k, v in _wire().items() if k != "version"}, "missing fields"),
        (_wire(extra=1), "unknown fields"),
        (_wire(service=3), "service must be a string"),
        (_wire(available="no"), "available a boolean"),
        (_wire(version=1.5), "version must be an integer"),
        (_wire(version=True), "version must be an integer"),
        (_wire(expires_at="soon"), "expiresAt must be a number"),
        (_wire(signature=5), "signature must be a string"),
        (_wire(endpoint="nope"), "endpoint must be"),
        (_wire(endpoint=5), "endpoint must be a string"),
        (_wire(cause_chain="x"), "causeChain must be a list"),
        (_wire(cause_chain=[{"endpoint": str(SELF)}]), "items must be"),
        (_wire(cause_chain=[{"endpoint": str(SELF), "reason": 1}]), "reason must be"),
        (_wire(service="payment"), "does not own"),
        (_wire(version=-1), "negative version"),
        (_wire(expires_at=0), "positive unix time"),
        (_wire(available=True), "no cause chain"),
        (_wire(cause_chain=[]), "needs a cause chain"),
        (_wire(cause_chain=[{"endpoint": str(ROOT), "reason": "x"}]), "end with the endpoint"),
        (
            _wire(cause_chain=[{"endpoint": str(SELF), "reason": "x"}] * 2),
            "repeats an endpoint",
        ),
    ],
)
def test_from_dict_names_what_is_malformed(data: dict[str, Any], message: str) -> None:
    with pytest.raises(MalformedUpdate, match=message):
        AvailabilityUpdate.from_dict(data)


@pytest.mark.parametrize("raw", [b"not json", b"[1, 2]", b"\xff\xfe"])
def test_from_json_refuses_non_objects(raw: bytes) -> None:
    with pytest.raises(MalformedUpdate):
        AvailabilityUpdate.from_json(raw)


def _raw(**changes: str) -> bytes:
    """The signed wire form with some values replaced by raw JSON text."""
    data = {k: json.dumps(v) for k, v in sign(down(), SECRET).to_dict().items()}
    data.update({_NEW.get(k, k): v for k, v in changes.items()})
    return ("{" + ",".join(f'"{k}":{v}' for k, v in data.items()) + "}").encode()


# Found by fuzzing the decoder (bench/fuzz): each escaped as another exception than
# MalformedUpdate, which a Redis subscriber does not expect (it dropped its subscription).
@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (_raw(expires_at="NaN"), "expiresAt must be a finite number"),
        (_raw(expires_at="Infinity"), "expiresAt must be a finite number"),
        (_raw(expires_at="1e400"), "expiresAt must be a finite number"),
        (_raw(expires_at="1e300"), "expiresAt must be"),  # past what protobuf carries
        (_raw(expires_at="225792068811225.97"), "expiresAt must be"),  # ms lost in a float
        (_raw(version=str(2**64)), "version must be"),
        (_raw(signature='"\\u00e9"'), "signature must be"),
        (_raw(signature='"abc"'), "signature must be"),
        (_raw(endpoint='"checkout POST /v1/orders\\ud800"'), "endpoint must be"),
        (
            _raw(
                cause_chain=f'[{{"endpoint":"{ROOT}","reason":"\\ud800"}},'
                f'{{"endpoint":"{SELF}","reason":"x"}}]'
            ),
            "reason must be",
        ),
    ],
)
def test_the_decoder_refuses_what_it_cannot_carry(raw: bytes, message: str) -> None:
    with pytest.raises(MalformedUpdate, match=message):
        AvailabilityUpdate.from_json(raw)


def test_verify_decides_about_any_update_it_is_given() -> None:
    """Built in code (not decoded), a broken signature or text is a verdict, never an error."""
    for signature in ("\u00e9" * 64, "zz", "AB" * 32):
        broken = replace(down(), signature=signature)
        assert verify(broken, SECRET, now=NOW) is Verdict.MALFORMED
        assert verify_signature(broken, SECRET) is Verdict.BAD_SIGNATURE
    surrogate = AvailabilityUpdate(
        "checkout", SELF, False, (Cause(SELF, "\ud800"),), NOW + 20, 7, signature="ab" * 32
    )
    assert verify(surrogate, SECRET, now=NOW) is Verdict.MALFORMED


def test_recovery_update_carries_no_chain() -> None:
    update = sign(AvailabilityUpdate("checkout", SELF, True, (), NOW + 60, 9), SECRET)
    assert AvailabilityUpdate.from_dict(update.to_dict()) == update
    assert verify(update, SECRET, now=NOW) is Verdict.ACCEPTED


_reason = st.text(max_size=30)


@given(
    available=st.booleans(),
    reasons=st.lists(_reason, min_size=1, max_size=4),
    offset=st.floats(0.001, 10_000, allow_nan=False),
    version=st.integers(0, 2**53),
)
def test_signed_updates_survive_the_wire(
    available: bool, reasons: list[str], offset: float, version: int
) -> None:
    links = [ep(f"s{i} GET /x{i}") for i in range(len(reasons) - 1)] + [SELF]
    chain = () if available else tuple(Cause(e, r) for e, r in zip(links, reasons, strict=True))
    update = sign(
        AvailabilityUpdate("checkout", SELF, available, chain, NOW + offset, version), SECRET
    )
    received = AvailabilityUpdate.from_json(update.to_json())
    assert received == update
    expected = Verdict.ACCEPTED if received.expires_at > NOW else Verdict.EXPIRED
    assert verify(received, SECRET, now=NOW) is expected
