"""The inbound hook strips every `ccb-*` header, in any case, by four byte reads a name."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cascadebreaker.sidecar.mesh.hook import _strip_cascade_headers, is_cascade_header

_NAME_BYTES = st.sampled_from(b"cCbB-_xX\x00\xe3\xc3\x83")


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
