"""The `ccb-refusal` mark (sidecar/proxy/refusals.py): sealing, opening, malformed values."""

from __future__ import annotations

import pytest

from cascadebreaker.sidecar.proxy.refusals import (
    find_refusal,
    open_seal,
    reason_of,
    seal,
)

KEY = b"k" * 32


def test_a_sealed_mark_opens_only_with_its_key_and_binding() -> None:
    mark = seal(KEY, "endpoint_unavailable", "v1.A.1.abc")
    assert open_seal(KEY, mark, "v1.A.1.abc") == "endpoint_unavailable"
    assert open_seal(b"x" * 32, mark, "v1.A.1.abc") is None  # another mesh
    assert open_seal(KEY, mark, "v1.A.2.abc") is None  # replayed for another call
    forged = b"circuit_open" + mark[len(b"endpoint_unavailable") :]
    assert open_seal(KEY, forged, "v1.A.1.abc") is None  # the code is covered too


def test_without_a_key_the_mark_is_unsigned() -> None:
    assert seal(None, "circuit_open") == b"circuit_open -"
    assert reason_of(b"circuit_open -") == "circuit_open"
    assert open_seal(KEY, b"circuit_open -") is None


@pytest.mark.parametrize(
    "value",
    [b"", b"circuit_open", b" - ", b"circuit_open a b", b"\xff\xfe x", b"x " + b"a" * 200],
)
def test_malformed_marks_are_not_refusals(value: bytes) -> None:
    assert reason_of(value) is None
    assert open_seal(KEY, value) is None


def test_the_first_mark_among_headers_is_found_case_insensitively() -> None:
    headers = [(b"content-type", b"x"), (b"CCB-Refusal", b"a -"), (b"ccb-refusal", b"b -")]
    assert find_refusal(headers) == b"a -"
    assert find_refusal([(b"ccb-refusals", b"a -")]) is None
