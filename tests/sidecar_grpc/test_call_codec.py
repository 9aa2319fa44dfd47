"""The `Call` rpc's hand-made codec against upb, in process: the one-pass reader of
`CallRequest` bytes gives what upb's parse gives (or the same refusal), on messages and on
arbitrary bytes, and the reply's bytes are what upb serializes."""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from hypothesis import example, given
from hypothesis import strategies as st

from cascadebreaker.sidecar.grpc.call_codec import (
    CallArgs,
    decode_call,
    encode_call_response,
    message_args,
    scan_call,
)
from cascadebreaker.sidecar.grpc.messages import BadArgument
from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2 as pb


def _outcome(run: object) -> CallArgs | str:
    """The checked call, or the refusal's message."""
    assert callable(run)
    try:
        result = run()
    except BadArgument as exc:
        return f"refused: {exc}"
    assert isinstance(result, CallArgs)
    return result


def _upb_outcome(data: bytes) -> CallArgs | str:
    """What the request means when upb parses it (what `Call` did before its codec)."""
    try:
        request = pb.CallRequest.FromString(data)
    except DecodeError:
        return "not a CallRequest"
    return _outcome(lambda: message_args(request))


def _ours(data: bytes) -> CallArgs | str:
    outcome = _outcome(lambda: decode_call(data))
    if isinstance(outcome, str) and outcome.startswith("refused: request: "):
        return "not a CallRequest"
    return outcome


# Text as callers write it, and what they should not: controls, spaces, non-latin-1, emoji.
_TEXT = st.one_of(
    st.sampled_from(["", "payment", "GET", "post", "M-SEARCH", "/", "/v1/charges?x=1", "é"]),
    st.text(max_size=40),
    st.text(alphabet="/ab\r\n\x00\x7f é€-", max_size=12),
)
_HEADER = st.builds(pb.Header, name=_TEXT, value=_TEXT)
_REQUEST = st.builds(
    pb.CallRequest,
    upstream=_TEXT,
    method=_TEXT,
    path=st.one_of(_TEXT, _TEXT.map(lambda t: "/" + t)),
    headers=st.lists(_HEADER, max_size=4),
    body=st.binary(max_size=300),
    timeout_ms=st.integers(0, 2**32 - 1),
    serving_endpoint=st.one_of(_TEXT, st.sampled_from(["POST /v1/orders", "GET /é", "GET /€"])),
)


@given(_REQUEST)
@example(pb.CallRequest(upstream="payment", path="/", headers=[pb.Header(name="x", value="é")]))
@example(pb.CallRequest(upstream="payment", path="/", headers=[pb.Header(name="x", value="€")]))
@example(pb.CallRequest(upstream="payment", path="/" + "a" * 9000))
def test_a_message_reads_as_upb_reads_it_in_one_pass(request: pb.CallRequest) -> None:
    data = request.SerializeToString()
    expected = _outcome(lambda: message_args(request))
    assert _ours(data) == expected
    # What protobuf libraries write never needs upb: the one pass reads it or refuses it.
    assert _outcome(lambda: scan_call(data)) == expected


def _varint(number: int) -> bytes:
    out = bytearray()
    while number >= 0x80:
        out.append(number & 0x7F | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


# Fields as a request might carry them, well or badly formed: declared and other wire types,
# unknown numbers, over-long varints, lengths past the end, groups.
_PIECE = st.one_of(
    st.builds(
        lambda tag, payload: bytes([tag]) + _varint(len(payload)) + payload,
        st.sampled_from([0x0A, 0x12, 0x1A, 0x22, 0x2A, 0x3A, 0x42, 0x32]),
        st.one_of(st.binary(max_size=20), st.sampled_from([b"payment", b"/", b"\n\x01x\x12\x01y"])),
    ),
    st.builds(lambda n: b"\x30" + _varint(n), st.integers(0, 2**70)),
    st.builds(
        lambda tag, n: bytes([tag]) + _varint(n),
        st.sampled_from([0x08, 0x18, 0x38, 0x48]),
        st.integers(0, 2**64),
    ),
    st.sampled_from(
        [b"\x35\x01\x02\x03\x04", b"\x31" + bytes(8), b"\x0b\x0c", b"\x0a\x80", b"\x0a\x05ab"]
    ),
    st.binary(max_size=6),
)


@given(st.lists(_PIECE, max_size=8).map(b"".join))
@example(b"\x0a\x07payment\x1a\x01/\x0a\x03old")  # a later copy of a field wins
@example(b"\x0a\x07payment\x1a\x01/\x30\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01")  # 10-byte varint
@example(b"\x0a\x07payment\x1a\x01/\x30\x85\x80\x80\x80\x40")  # uint32 overflow: upb truncates
@example(b"\x0a\x07payment\x1a\x02/\xff")  # not UTF-8
@example(b"\x0a\x07payment\x1a\x01/\x40\x01")  # an unknown field
def test_any_bytes_read_as_upb_reads_them(data: bytes) -> None:
    assert _ours(data) == _upb_outcome(data)


def test_a_typical_request_is_read_in_one_pass() -> None:
    request = pb.CallRequest(
        upstream="payment",
        method="post",
        path="/v1/charges",
        headers=[pb.Header(name="X-Trace", value="caf\xe9")],
        body=b"{}",
        timeout_ms=250,
        serving_endpoint="POST /v1/orders",
    )
    args = scan_call(request.SerializeToString())
    assert args == CallArgs(
        "payment",
        b"POST",
        b"/v1/charges",
        [(b"X-Trace", b"caf\xe9")],
        b"{}",
        250,
        "POST /v1/orders",
    )
    assert scan_call(pb.CallRequest(upstream="payment", path="/").SerializeToString()) == CallArgs(
        "payment", b"GET", b"/", [], b"", 0, ""
    )


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (b"\x0a\x07payment\x1a\x02/\xff", "request"),  # upb: invalid UTF-8
        (b"\x0a\x07payment\x1a\x09/", "request"),  # truncated
        (pb.CallRequest(upstream="payment").SerializeToString(), "path"),
        (pb.CallRequest(path="/").SerializeToString(), "upstream"),
    ],
)
def test_refusals_name_the_field(data: bytes, field: str) -> None:
    with pytest.raises(BadArgument, match=f"^{field}: "):
        decode_call(data)


def _upb_reply(status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
    """What the sidecar answered before: a message per header, decoded as latin-1."""
    return pb.CallResponse(
        status=status,
        headers=[
            pb.Header(name=n.decode("latin-1").lower(), value=v.decode("latin-1"))
            for n, v in headers
        ],
        body=body,
    ).SerializeToString()


_NAME = st.binary(min_size=0, max_size=300)
_HEADERS = st.lists(st.tuples(_NAME, st.binary(max_size=300)), max_size=6)


@given(st.integers(0, 2**32 - 1), _HEADERS, st.binary(max_size=70000))
def test_encoding_matches_upb_byte_for_byte(
    status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    assert encode_call_response(status, headers, body) == _upb_reply(status, headers, body)


_COMMON_NAMES = st.sampled_from(
    [b"Content-Type", b"content-length", b"DATE", b"Server", b"ETag", b"etag", b"Etag", b"Vary"]
)


@given(
    st.lists(
        st.tuples(_COMMON_NAMES, st.binary(max_size=130) | st.text(max_size=40).map(str.encode)),
        max_size=8,
    )
)
@example([(b"Content-Length", b""), (b"Server", b"x" * 110), (b"Server", b"x" * 111)])
def test_common_names_encode_as_upb_does(headers: list[tuple[bytes, bytes]]) -> None:
    # The names servers commonly send come from a table, in any of its spellings or none.
    assert encode_call_response(200, headers, b"") == _upb_reply(200, headers, b"")


def test_encoding_of_a_typical_response() -> None:
    headers = [(b"Content-Type", b"text/plain"), (b"X-Caf\xe9", b"cr\xe8me"), (b"Empty", b"")]
    encoded = encode_call_response(200, headers, b"hello")
    message = pb.CallResponse.FromString(encoded)
    assert message.status == 200
    assert [(h.name, h.value) for h in message.headers] == [
        ("content-type", "text/plain"),
        ("x-caf\xe9", "cr\xe8me"),
        ("empty", ""),
    ]
    assert message.body == b"hello"
