"""proto/ccb/v1/signing-vectors.json: the canonical bytes and signatures other languages check
themselves against (docs/contract.md) are the ones this implementation makes and accepts."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest

from cascadebreaker.cascade.updates import (
    AvailabilityUpdate,
    Verdict,
    canonical_bytes,
    sign,
    verify_signature,
)

VECTORS = Path(__file__).resolve().parents[2] / "proto" / "ccb" / "v1" / "signing-vectors.json"
DOC = json.loads(VECTORS.read_text(encoding="utf-8"))
SECRET = DOC["secret"].encode()
CASES: list[dict[str, Any]] = DOC["cases"]


def test_the_secret_is_given_both_ways_and_every_kind_of_update_is_covered() -> None:
    assert bytes.fromhex(DOC["secret_hex"]) == SECRET
    assert {case["name"] for case in CASES} >= {"unavailable", "available", "non_ascii", "legacy"}


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_canonical_bytes_and_signature(case: dict[str, Any]) -> None:
    update = AvailabilityUpdate.from_dict(case["update"])
    legacy = case["name"] == "legacy"
    canonical = case["canonical"].encode("utf-8")
    assert canonical_bytes(update, legacy=legacy) == canonical
    assert hmac.new(SECRET, canonical, hashlib.sha256).hexdigest() == case["signature"]
    assert update.signature == case["signature"]
    assert verify_signature(update, SECRET) is Verdict.ACCEPTED
    assert verify_signature(update, b"another secret") is Verdict.BAD_SIGNATURE
    if not legacy:  # what we send today is exactly the vector
        assert sign(update, SECRET).signature == case["signature"]
        assert json.loads(update.to_json()) == case["update"]


def test_non_ascii_text_is_raw_utf8_and_quotes_are_escaped() -> None:
    (case,) = [c for c in CASES if c["name"] == "non_ascii"]
    canonical = case["canonical"].encode("utf-8")
    assert "café".encode() in canonical and b"\\u" not in canonical
    assert b'\\"b\xc3\xa4ckerei\\"' in canonical and b"\\t" in canonical
