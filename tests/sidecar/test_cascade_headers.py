"""The inbound hook strips every `ccb-*` header, in any case, by four byte reads a name."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cascadebreaker.sidecar.mesh import hook
from cascadebreaker.sidecar.mesh.hook import _strip_cascade_headers, is_cascade_header, may_be_read

_NAME_BYTES = st.sampled_from(b"cCbB-_xX\x00\xe3\xc3\x83")
_READ_BYTES = st.sampled_from(b"tTbBxX3-raceRACEpnid\xf4\xd4")


@given(st.binary(max_size=8) | st.lists(_NAME_BYTES, max_size=8).map(bytes))
def test_a_cascade_name_is_one_whose_first_four_bytes_lower_case_to_ccb_dash(name: bytes) -> None:
    assert is_cascade_header(name) == (name[:4].lower() == b"ccb-")


def test_every_spelling_of_the_prefix_counts_and_near_misses_do_not() -> None:
    for name in (b"ccb-hop", b"CCB-Cause", b"cCb-x", b"ccb-"):
        assert is_cascade_header(name)
    for name in (b"ccb", b"ccb_hop", b"ccbx-hop", b"xccb-hop", b"cc-b", b"\xe3cb-", b"ccB\xad"):
        assert not is_cascade_header(name)


def test_stripping_keeps_the_other_headers_in_order_and_in_the_same_list() -> None:
    headers = [
        (b"Host", b"a"),
        (b"CCB-Hop", b"t"),
        (b"x-kept", b"1"),
        (b"ccb-serving-endpoint", b"e"),
        (b"accept", b"*/*"),
    ]
    same = headers
    _strip_cascade_headers(headers)
    assert same is headers  # the proxy forwards this very list
    assert headers == [(b"Host", b"a"), (b"x-kept", b"1"), (b"accept", b"*/*")]
    plain = [(b"host", b"a"), (b"accept", b"*/*")]
    _strip_cascade_headers(plain)
    assert plain == [(b"host", b"a"), (b"accept", b"*/*")]


def test_every_name_the_cascade_reads_or_answers_passes_the_byte_filters() -> None:
    """The compiled build settles other names by their bytes alone: a name the cascade reads
    (`_READ`) or takes from responses (`_OURS`) must never be settled as plain."""
    for lower in [*hook._READ, b"ccb-anything"]:
        for spelling in (lower, lower.upper(), lower.title()):
            assert may_be_read(spelling), spelling
    for ours in hook._OURS:
        assert is_cascade_header(ours) and is_cascade_header(ours.upper()), ours


@given(st.binary(max_size=16) | st.lists(_READ_BYTES, max_size=14).map(bytes))
def test_a_name_the_filter_settles_is_neither_read_nor_a_cascade_header(name: bytes) -> None:
    if not may_be_read(name):
        assert name.lower() not in hook._READ
        assert name[:4].lower() != b"ccb-"


def _refill(live: set[bytes], names: set[bytes]) -> None:
    live.clear()
    live.update(names)


@pytest.mark.parametrize("compiled_form", [True, False])
def test_both_forms_find_the_same_requests_and_responses_plain(
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest, compiled_form: bool
) -> None:
    """Each build runs one form (`wire.COMPILED` is a constant once compiled); interpreted,
    the flag runs both here."""
    monkeypatch.setattr(hook, "COMPILED", compiled_form)
    # The sets are Final (compiled code holds them, not the module's names): filled in place.
    for live, names in (
        (hook._PLAIN_REQUEST, {b"Host", b"accept"}),
        (hook._PLAIN_RESPONSE, {b"server", b"ccb-cause"}),
    ):
        request.addfinalizer(functools.partial(_refill, live, set(live)))
        _refill(live, names)
    assert hook._plain_request([(b"Host", b"a"), (b"accept", b"*/*")])
    assert not hook._plain_request([(b"Host", b"a"), (b"traceparent", b"00-1-2-01")])
    assert not hook._plain_request([(b"CCB-Hop", b"t")])
    assert hook._plain_response([(b"server", b"n"), (b"ccb-cause", b"x")])
    assert not hook._plain_response([(b"server", b"n"), (b"ccb-refusal", b"m")])


_HEADER_NAMES = st.sampled_from(
    [b"ccb-hop", b"CCB-Serving-Endpoint", b"ccb-", b"host", b"Accept", b"ccb", b"xccb-a", b"via"]
)


@given(st.lists(st.tuples(_HEADER_NAMES, st.binary(max_size=3)), max_size=8))
def test_stripping_removes_exactly_the_cascade_headers_wherever_they_are(
    headers: list[tuple[bytes, bytes]],
) -> None:
    """Adjacent, first, last, all or none: what is left is the other headers, in order."""
    expected = [(n, v) for n, v in headers if n[:4].lower() != b"ccb-"]
    same = headers
    _strip_cascade_headers(headers)
    assert same is headers and headers == expected


@pytest.mark.parametrize("compiled_form", [True, False])
@given(
    headers=st.lists(
        st.tuples(
            st.sampled_from(sorted(hook._READ)) | _HEADER_NAMES | st.binary(max_size=12),
            st.binary(max_size=4),
        ),
        max_size=8,
    )
)
def test_both_forms_read_the_same_values(
    compiled_form: bool, headers: list[tuple[bytes, bytes]]
) -> None:
    """`_read` settles most names by their bytes when compiled: it finds what the set and dict
    look-ups find (the first value of each name it reads, in any case)."""
    expected: dict[str, str] = {}
    for name, value in headers:
        key = hook._READ.get(name.lower())
        if key is not None and key not in expected:
            expected[key] = value.decode("latin-1")
    saved = getattr(hook, "COMPILED")  # noqa: B009 - not re-exported by the module
    setattr(hook, "COMPILED", compiled_form)  # noqa: B010 - as above
    try:
        assert hook._read(headers) == expected
    finally:
        setattr(hook, "COMPILED", saved)  # noqa: B010 - as above
