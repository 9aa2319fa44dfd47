"""Body framing in process, the way h11 tests its `_body_framing`: tables over the pure
functions of http/framing.py, then properties over random framing headers, through the pure
function and through a server connection fed bytes (no sockets)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadebreaker.sidecar.http.connection import ServerConnection
from cascadebreaker.sidecar.http.exchange import RequestHead
from cascadebreaker.sidecar.http.framing import (
    CHUNKED,
    UNTIL_CLOSE,
    FramingError,
    client_response_framing,
    forward_request_framing,
    length_value,
    request_framing,
    response_framing,
    upgrade_requested,
    whole_body_framing,
)
from cascadebreaker.sidecar.http.limits import ConnectionTracker, Limits

# -- requests ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lengths", "encodings", "upgrade", "expected"),
    [
        (None, None, False, None),
        ([b"0"], None, False, 0),
        ([b"12"], None, False, 12),
        ([b" 12 "], None, False, 12),
        ([b"12", b"12"], None, False, 12),  # repeated but equal: one length
        (None, [b"chunked"], False, CHUNKED),
        (None, [b" Chunked "], False, CHUNKED),
        (None, None, True, None),  # an upgrade without a body
        ([b"0"], None, True, 0),
    ],
)
def test_request_framing(
    lengths: list[bytes] | None, encodings: list[bytes] | None, upgrade: bool, expected: Any
) -> None:
    assert request_framing(lengths, encodings, upgrade) == expected


@pytest.mark.parametrize(
    ("lengths", "encodings", "upgrade", "message"),
    [
        ([b"3"], [b"chunked"], False, "both content-length and transfer-encoding"),
        ([b"3", b"4"], None, False, "conflicting content-length headers"),
        ([b"3, 3"], None, False, "invalid content-length"),
        ([b"-1"], None, False, "invalid content-length"),
        ([b"0x10"], None, False, "invalid content-length"),
        ([b""], None, False, "invalid content-length"),
        (None, [b"gzip, chunked"], False, "unsupported transfer-encoding"),
        (None, [b"identity"], False, "unsupported transfer-encoding"),
        (None, [b"chunked", b"chunked"], False, "repeated transfer-encoding header"),
        ([b"5"], None, True, "a protocol upgrade request must not have a body"),
        (None, [b"chunked"], True, "a protocol upgrade request must not have a body"),
    ],
)
def test_request_framing_refuses_what_parsers_could_read_differently(
    lengths: list[bytes] | None, encodings: list[bytes] | None, upgrade: bool, message: str
) -> None:
    with pytest.raises(FramingError) as refused:
        request_framing(lengths, encodings, upgrade)
    assert (refused.value.status, refused.value.message) == (400, message)


@pytest.mark.parametrize(
    ("connection", "upgrade", "expected"),
    [
        ([b"upgrade"], b"websocket", True),
        ([b"keep-alive, Upgrade"], b"h2c", True),
        ([b"keep-alive"], b"websocket", False),  # Upgrade without Connection: upgrade
        ([b"upgrade"], None, False),
        ([], None, False),
    ],
)
def test_upgrade_requested(connection: list[bytes], upgrade: bytes | None, expected: bool) -> None:
    assert upgrade_requested(connection, upgrade) is expected


@pytest.mark.parametrize(
    ("length", "line"),
    [
        (None, b""),
        (0, b"content-length: 0\r\n"),
        (42, b"content-length: 42\r\n"),
        (CHUNKED, b"transfer-encoding: chunked\r\n"),
    ],
)
def test_forward_request_framing(length: int | None, line: bytes) -> None:
    assert forward_request_framing(length) == line


@pytest.mark.parametrize(
    ("method", "size", "line"),
    [
        (b"GET", 0, b""),
        (b"POST", 0, b"content-length: 0\r\n"),  # some servers require a length on POST
        (b"PATCH", 0, b"content-length: 0\r\n"),
        (b"DELETE", 3, b"content-length: 3\r\n"),
    ],
)
def test_whole_body_framing(method: bytes, size: int, line: bytes) -> None:
    assert whole_body_framing(method, size) == line


# -- responses --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "head_request", "lengths", "chunked", "expected"),
    [
        (200, False, [b"10"], False, (10, 10)),
        (200, False, [b"10", b" 10"], False, (10, 10)),
        (200, False, [], True, (None, CHUNKED)),
        (200, False, [b"10"], True, (None, CHUNKED)),  # chunked wins (RFC 9112 §6.3)
        (200, False, [b"x"], True, (None, CHUNKED)),
        (200, False, [], False, (None, UNTIL_CLOSE)),
        (200, True, [b"10"], False, (10, 0)),  # HEAD: the length names the would-be body
        (200, True, [], True, (None, 0)),
        (204, False, [], False, (None, 0)),
        (304, False, [b"10"], False, (10, 0)),
        (101, False, [], False, (None, 0)),
        (500, False, [b"0"], False, (0, 0)),
    ],
)
def test_response_framing(
    status: int,
    head_request: bool,
    lengths: list[bytes],
    chunked: bool,
    expected: tuple[int | None, int],
) -> None:
    assert response_framing(status, head_request, lengths, chunked) == expected


@pytest.mark.parametrize("lengths", [[b"10", b"11"], [b"ten"], [b"-3"], [b"1e3"], [b""]])
def test_response_framing_refuses_an_invalid_length(lengths: list[bytes]) -> None:
    with pytest.raises(FramingError, match="invalid content-length"):
        response_framing(200, False, lengths, False)


@pytest.mark.parametrize(
    ("status", "head", "length", "http10", "keep_alive", "expected"),
    [
        (200, False, 5, False, True, (b"content-length: 5\r\n", False, True)),
        (200, False, None, False, True, (b"transfer-encoding: chunked\r\n", True, True)),
        (200, False, None, True, True, (b"connection: close\r\n", False, False)),
        (
            200,
            False,
            5,
            True,
            True,
            (b"content-length: 5\r\nconnection: keep-alive\r\n", False, True),
        ),
        (200, True, 5, False, True, (b"content-length: 5\r\n", False, True)),
        (200, True, None, False, True, (b"", False, True)),
        (204, False, None, False, True, (b"", False, True)),
        (304, False, None, True, True, (b"connection: keep-alive\r\n", False, True)),
        (
            200,
            False,
            5,
            False,
            False,
            (b"content-length: 5\r\nconnection: close\r\n", False, False),
        ),
    ],
)
def test_client_response_framing(
    status: int,
    head: bool,
    length: int | None,
    http10: bool,
    keep_alive: bool,
    expected: tuple[bytes, bool, bool],
) -> None:
    assert client_response_framing(status, head, length, http10, keep_alive) == expected


# -- properties -------------------------------------------------------------------------------

_LENGTH_VALUES = st.sampled_from([b"0", b"3", b" 3", b"4", b"03", b"-1", b"3,3", b"x", b""])
_ENCODING_VALUES = st.sampled_from([b"chunked", b"Chunked", b"gzip", b"gzip, chunked", b""])


@settings(max_examples=500, deadline=None, derandomize=True)
@given(
    lengths=st.none() | st.lists(_LENGTH_VALUES, min_size=1, max_size=3),
    encodings=st.none() | st.lists(_ENCODING_VALUES, min_size=1, max_size=2),
    upgrade=st.booleans(),
)
def test_a_body_length_is_only_ever_read_one_way(
    lengths: list[bytes] | None, encodings: list[bytes] | None, upgrade: bool
) -> None:
    """Whatever the framing headers, either they are refused (400) or exactly one reading of
    them exists: never both a length and chunked, never two different lengths."""
    try:
        length = request_framing(lengths, encodings, upgrade)
    except FramingError as refused:
        status = refused.status
        length = -99
    if length == -99:
        assert status == 400
    elif length is None:
        assert lengths is None and encodings is None
    elif length == CHUNKED:
        assert lengths is None and encodings is not None and len(encodings) == 1
        assert not upgrade
    else:
        assert encodings is None and lengths is not None
        assert {int(v) for v in lengths} == {length}
        assert all(v.strip().isdigit() for v in lengths)
        assert length == 0 or not upgrade


class _Transport:
    def __init__(self) -> None:
        self.written = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def writelines(self, pieces: Any) -> None:
        self.write(b"".join(pieces))

    def get_extra_info(self, key: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if key == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True


class _Recorder:
    """A handler whose exchanges keep the body they were given."""

    def __init__(self) -> None:
        self.requests: list[tuple[RequestHead, list[bytes]]] = []

    def handle(self, conn: ServerConnection, request: RequestHead) -> Any:
        body: list[bytes] = []
        self.requests.append((request, body))

        class _Exchange:
            def start(self) -> None:
                pass

            def request_body(self, data: bytes) -> None:
                body.append(data)

            def request_end(self) -> None:
                pass

            def downstream_writable(self, writable: bool) -> None:
                pass

            def connection_lost(self) -> None:
                pass

            def request_failed(self, outcome: str) -> bool:
                return True

        return _Exchange()


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    lengths=st.lists(_LENGTH_VALUES, max_size=3),
    encodings=st.lists(_ENCODING_VALUES, max_size=2),
    body=st.binary(max_size=12),
)
async def test_a_server_connection_forwards_only_unambiguous_bodies(
    lengths: list[bytes], encodings: list[bytes], body: bytes
) -> None:
    """Through the parser: a request whose framing the pure rules refuse never reaches a
    handler and is answered 400; one that both they and the parser accept reaches it with
    exactly its declared body."""
    head = b"POST /x HTTP/1.1\r\nhost: a\r\n"
    head += b"".join(b"content-length: %b\r\n" % v for v in lengths)
    head += b"".join(b"transfer-encoding: %b\r\n" % v for v in encodings)
    recorder = _Recorder()
    conn = ServerConnection(recorder, Limits(), ConnectionTracker())
    transport = _Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]  # a stand-in transport
    conn.data_received(head + b"\r\n" + body)
    try:
        expected = request_framing(lengths or None, encodings or None)
    except FramingError:
        expected = "refused"
    if expected == "refused":
        assert recorder.requests == []
        assert transport.written.startswith(b"HTTP/1.1 400 ")
        assert transport.closed
        return
    if transport.written.startswith(b"HTTP/1.1 400 "):
        # llhttp is stricter, never looser: it also refuses a repeated Content-Length (even an
        # equal one) and a malformed chunked body.
        assert recorder.requests == [] or expected == CHUNKED
        assert expected == CHUNKED or len(lengths) > 1
        return
    assert len(recorder.requests) == 1
    request, received = recorder.requests[0]
    data = b"".join(received)
    if expected == CHUNKED:
        assert request.chunked and request.content_length is None
    elif expected is None:
        assert not request.has_body and data == b""
    else:
        assert request.content_length == expected
        assert data == body[:expected]


@given(st.text(alphabet="0123456789", min_size=1, max_size=40))
def test_a_declared_length_reads_as_int_would(digits: str) -> None:
    """Lengths are read by a loop (compiled, far cheaper than `int(bytes)`): every run of
    digits, leading zeros and ones too long for the loop included, reads as `int` reads it."""
    value = digits.encode()
    assert response_framing(200, False, [value], False) == (int(digits), int(digits))
    assert response_framing(200, False, [b" " + value + b"\t"], False)[0] == int(digits)
    assert request_framing([value], None, False) == int(digits)


@given(
    st.binary(max_size=24) | st.text(alphabet="0123456789 +-_\u0663x", max_size=24).map(str.encode)
)
def test_a_length_value_is_its_digits_or_minus_one(raw: bytes) -> None:
    """One pass checks and reads a length: exactly what `isdigit` accepts reads as `int`
    reads it; anything else (empty, signs, spaces, non-ASCII digits) is -1."""
    assert length_value(raw) == (int(raw) if raw.isdigit() else -1)


# -- versions and keep-alive, as the reader decides them -------------------------------------

_V11 = b"GET /a HTTP/1.1\r\nhost: a\r\n\r\n"
_V11_CLOSE = b"GET /b HTTP/1.1\r\nhost: a\r\nConnection: close\r\n\r\n"
_V11_KEEP = b"GET /c HTTP/1.1\r\nhost: a\r\nconnection: keep-alive\r\n\r\n"
_V10 = b"GET /d HTTP/1.0\r\nhost: a\r\n\r\n"
_V10_KEEP = b"GET /e HTTP/1.0\r\nhost: a\r\nconnection: keep-alive\r\n\r\n"
_V10_KEEP_TITLE = b"GET /f HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"
_V10_KEEP_LISTED = b"GET /g HTTP/1.0\r\nconnection: x-hop, KEEP-ALIVE\r\nx-hop: 1\r\n\r\n"
_V10_PROXY_KEEP = b"GET /h HTTP/1.0\r\nProxy-Connection: keep-alive\r\n\r\n"
_V10_KEEP_UPGRADE = b"GET /i HTTP/1.0\r\nupgrade: websocket\r\nconnection: keep-alive\r\n\r\n"

# (request bytes, http10, keep_alive) as the reader hands them on.
_VERSIONS = [
    (_V11, False, True),
    (_V11_CLOSE, False, False),
    (_V11_KEEP, False, True),
    (_V10, True, False),
    (_V10_KEEP, True, True),
    (_V10_KEEP_TITLE, True, True),
    (_V10_KEEP_LISTED, True, True),
    (_V10_PROXY_KEEP, True, True),
    (_V10_KEEP_UPGRADE, True, True),
]


def _read(data: bytes, *pieces: int) -> tuple[_Recorder, _Transport]:
    recorder = _Recorder()
    conn = ServerConnection(recorder, Limits(), ConnectionTracker())
    transport = _Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]  # a stand-in transport
    start = 0
    for end in (*pieces, len(data)):
        conn.data_received(data[start:end])
        start = end
    return recorder, transport


@pytest.mark.parametrize(("data", "http10", "keep_alive"), _VERSIONS)
async def test_the_version_and_keep_alive_of_a_request(
    data: bytes, http10: bool, keep_alive: bool
) -> None:
    """HTTP/1.0 is told apart from 1.1 however keep-alive is asked for (a Connection token,
    any case, in a list, or llhttp's Proxy-Connection), and a 1.0 request is never upgraded."""
    recorder, transport = _read(data)
    assert transport.written == b""
    [(request, _)] = recorder.requests
    assert (request.http10, request.keep_alive) == (http10, keep_alive)
    assert request.upgrade == b""
    assert b"x-hop" not in [name for name, _ in request.headers]


async def test_versions_are_read_per_request_on_one_connection() -> None:
    """Pipelined requests of both versions, in every order, through one parser: what one
    request's headers said never carries over to the next."""
    requests = [entry for entry in _VERSIONS if entry[2]]  # kept alive: the connection goes on
    sequence = [*requests, *reversed(requests), *requests[::2], *requests[1::2]]
    data = b"".join(entry[0] for entry in sequence)
    for pieces in ((), tuple(range(1, len(data)))):  # all at once, then byte by byte
        recorder, transport = _read(data, *pieces)
        assert transport.written == b""
        got = [(request.http10, request.keep_alive) for request, _ in recorder.requests]
        assert got == [(http10, keep_alive) for _, http10, keep_alive in sequence]


@pytest.mark.parametrize(
    "data",
    [
        b"GET / HTTP/2.0\r\nconnection: keep-alive\r\n\r\n",
        b"GET / HTTP/2.0\r\n\r\n",
        b"GET / HTTP/0.9\r\nproxy-connection: keep-alive\r\n\r\n",
        b"GET / HTTP/0.9\r\n\r\n",
    ],
)
async def test_other_versions_are_refused_even_when_kept_alive(data: bytes) -> None:
    recorder, transport = _read(data)
    assert recorder.requests == []
    assert transport.written.startswith(b"HTTP/1.1 400 ")
    assert b"unsupported HTTP version" in transport.written
    assert transport.closed


async def test_a_websocket_handshake_needs_http11() -> None:
    handshake = b"upgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-key: x\r\n\r\n"
    recorder, _ = _read(b"GET /ws HTTP/1.1\r\nhost: a\r\n" + handshake)
    assert recorder.requests[0][0].upgrade == b"websocket"
    recorder, _ = _read(b"GET /ws HTTP/1.0\r\nhost: a\r\n" + handshake)
    [(request, _)] = recorder.requests
    assert request.http10 and request.upgrade == b""


_SPECIAL_REQUESTS = [
    b"POST /a HTTP/1.1\r\nhost: one\r\ncontent-length: 3\r\n\r\nabc",
    b"POST /b HTTP/1.1\r\nhost: two\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    b"POST /c HTTP/1.1\r\nhost: three\r\nexpect: 100-continue\r\ncontent-length: 1\r\n\r\nz",
    b"GET /d HTTP/1.1\r\nconnection: x-hop\r\nx-hop: 1\r\nx-end: 2\r\n\r\n",
    b"GET /e HTTP/1.1\r\nhost: five\r\nupgrade: h2c\r\nconnection: upgrade\r\n\r\n",
    b"GET /f HTTP/1.1\r\nupgrade: websocket\r\n\r\n",  # not asked for: no Connection token
    b"POST /g HTTP/1.1\r\nconnection: upgrade\r\ncontent-length: 1\r\n\r\nq",  # no Upgrade
]
_PLAIN = b"GET /plain HTTP/1.1\r\nx-end: 1\r\n\r\n"


def _fields(request: RequestHead) -> tuple[object, ...]:
    return (
        request.target,
        request.chunked,
        request.content_length,
        request.expect_continue,
        request.host,
        request.upgrade,
        request.http10,
        request.keep_alive,
        request.headers,
    )


@pytest.mark.parametrize("first", _SPECIAL_REQUESTS)
async def test_special_headers_never_carry_over_to_the_next_request(first: bytes) -> None:
    """A request with framing, Expect, Connection or Upgrade headers, then each other such
    request, then a plain one, on one connection (all at once, then byte by byte): each is read
    as it would be alone; the plain one has no body, no Host, no Expect, keeps its headers,
    and is kept alive as HTTP/1.1."""
    alone = {data: _fields(_read(data)[0].requests[0][0]) for data in _SPECIAL_REQUESTS}
    for second in _SPECIAL_REQUESTS:
        data = first + second + _PLAIN
        for pieces in ((), tuple(range(1, len(data)))):
            recorder, _ = _read(data, *pieces)
            got = [request for request, _ in recorder.requests]
            assert [_fields(r) for r in got[:2]] == [alone[first], alone[second]]
            plain = got[2]
            assert _fields(plain) == (
                b"/plain",
                False,
                None,
                False,
                b"",
                b"",
                False,
                True,
                [(b"x-end", b"1")],
            )
            assert b"".join(recorder.requests[2][1]) == b""
