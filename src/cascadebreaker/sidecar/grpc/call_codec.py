"""The `Call` rpc's request and reply in protobuf's wire format, without message objects.

`Call` is registered with neither deserializer nor serializer (api.add_servicer): it gets the
request's bytes and answers bytes. On the request path that saves upb's parse and an attribute
look-up per field (each ~500 instructions), and a message object per response header.

- `decode_call` reads a `CallRequest` as every protobuf library writes it (fields in any
  order, each with its declared wire type, nothing unknown) in one pass over the bytes
  (`scan_call`). Anything else (unknown fields, other wire types, over-long varints,
  truncation, bad UTF-8) goes to upb (`CallRequest.FromString`), so the meaning of a request
  is upb's either way; what upb cannot parse is INVALID_ARGUMENT, named `request`.
- Both paths end in the same checks (`call_args`), on the fields as the wire has them
  (UTF-8 bytes); a malformed field raises `BadArgument` naming it.
- `encode_call_response` writes what upb would serialize, byte for byte.

Compiled with the request path (pyproject.toml's mypyc list); the tests compare both paths
with upb on random messages and random bytes (tests/sidecar_grpc/test_call_codec.py).
"""

from __future__ import annotations

import re
from typing import Any, Final

from google.protobuf.message import DecodeError

from cascadebreaker.sidecar.grpc.messages import BadArgument, validate_endpoint
from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2 as pb
from cascadebreaker.sidecar.http.wire import RawHeaders

__all__ = [
    "CallArgs",
    "call_args",
    "decode_call",
    "encode_call_response",
    "message_args",
    "scan_call",
]

# RFC 9110 tokens (as messages.py has them for text): methods such as M-SEARCH are legal.
_METHOD: Final = re.compile(rb"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,32}$")
_TOKEN: Final = re.compile(rb"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$")
_BAD_VALUE: Final = re.compile(rb"[\x00\r\n]")
_BAD_PATH: Final = re.compile(rb"[\x00-\x20\x7f]")
MAX_PATH: Final = 8192  # bytes, as the path travels
MAX_HEADERS: Final = 100
# Methods as most calls spell them, already as the request line has them (no regex, no copy).
_COMMON_METHODS: Final = {
    spelling: name
    for name in (b"GET", b"POST", b"PUT", b"PATCH", b"DELETE", b"HEAD", b"OPTIONS")
    for spelling in (name, name.lower())
}
# CallRequest's fields with their wire types, as one tag byte each (field << 3 | type).
_UPSTREAM: Final = 0x0A  # 1, string
_METHOD_TAG: Final = 0x12  # 2, string
_PATH: Final = 0x1A  # 3, string
_HEADER: Final = 0x22  # 4, Header
_BODY: Final = 0x2A  # 5, bytes
_TIMEOUT_MS: Final = 0x30  # 6, uint32 (varint)
_SERVING: Final = 0x3A  # 7, string
_NAME: Final = 0x0A  # Header 1, string
_VALUE: Final = 0x12  # Header 2, string


class CallArgs:
    """A checked `CallRequest`, as the pipeline takes it: method, path and headers as the
    request line and head will carry them."""

    __slots__ = ("body", "headers", "method", "path", "serving", "timeout_ms", "upstream")

    def __init__(
        self,
        upstream: str,
        method: bytes,
        path: bytes,
        headers: RawHeaders,
        body: bytes,
        timeout_ms: int,
        serving: str,
    ) -> None:
        self.upstream = upstream
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
        self.timeout_ms = timeout_ms
        self.serving = serving

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CallArgs):
            return NotImplemented
        return self._fields() == other._fields()

    def __repr__(self) -> str:
        return f"CallArgs{self._fields()!r}"

    def _fields(self) -> tuple[str, bytes, bytes, RawHeaders, bytes, int, str]:
        return (
            self.upstream,
            self.method,
            self.path,
            self.headers,
            self.body,
            self.timeout_ms,
            self.serving,
        )


def decode_call(data: bytes) -> CallArgs:
    """The request of a `Call`, checked; `BadArgument` naming the field otherwise."""
    args = scan_call(data)
    if args is not None:
        return args
    try:
        request = pb.CallRequest.FromString(data)
    except DecodeError as exc:
        raise BadArgument(f"request: not a ccb.v1.CallRequest ({exc})") from exc
    return message_args(request)


def message_args(request: Any) -> CallArgs:
    """`call_args` of a parsed `CallRequest` message."""
    return call_args(
        request.upstream.encode(),
        request.method.encode(),
        request.path.encode(),
        [(h.name.encode(), h.value.encode()) for h in request.headers],
        request.body,
        request.timeout_ms,
        request.serving_endpoint.encode(),
    )


def scan_call(data: bytes) -> CallArgs | None:
    """`CallRequest` read in one pass when it is written as protobuf libraries write it: each
    field with its declared wire type, no unknown field, valid UTF-8, lengths within bounds;
    else None (the caller asks upb). Later copies of a field win, as in upb."""
    upstream = method = path = body = serving = b""
    headers: RawHeaders = []
    timeout_ms = 0
    end = len(data)
    at = 0
    while at < end:
        tag = data[at]
        at += 1
        if tag == _TIMEOUT_MS:
            timeout_ms, at = _varint_at(data, at, end)
            if at < 0 or timeout_ms > 0xFFFFFFFF:
                return None
            continue
        size, at = _varint_at(data, at, end)
        start = at
        at += size
        if start < 0 or at > end:
            return None
        if tag == _HEADER:
            header = _header_at(data, start, at)
            if header is None:
                return None
            headers.append(header)
            continue
        chunk = data[start:at]
        if tag == _BODY:
            body = chunk
            continue
        if not (chunk.isascii() or _utf8(chunk)):
            return None
        if tag == _PATH:
            path = chunk
        elif tag == _UPSTREAM:
            upstream = chunk
        elif tag == _METHOD_TAG:
            method = chunk
        elif tag == _SERVING:
            serving = chunk
        else:
            return None
    return call_args(upstream, method, path, headers, body, timeout_ms, serving)


def _varint_at(data: bytes, at: int, end: int) -> tuple[int, int]:
    """The varint at `at` and the index after it; (0, -1) past `end` or beyond 32 bits + 3
    (five bytes: what a length or a uint32 needs; longer ones go to upb)."""
    value = 0
    shift = 0
    while at < end and shift < 35:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    return 0, -1


def _header_at(data: bytes, at: int, end: int) -> tuple[bytes, bytes] | None:
    """A `Header` message in data[at:end] as UTF-8 (name, value); None if unusual."""
    name = value = b""
    while at < end:
        tag = data[at]
        size, start = _varint_at(data, at + 1, end)
        at = start + size
        if start < 0 or at > end:
            return None
        chunk = data[start:at]
        if not (chunk.isascii() or _utf8(chunk)):
            return None
        if tag == _NAME:
            name = chunk
        elif tag == _VALUE:
            value = chunk
        else:
            return None
    return name, value


def _utf8(chunk: bytes) -> bool:
    try:
        chunk.decode()
    except UnicodeDecodeError:
        return False
    return True


def call_args(
    upstream: bytes,
    method: bytes,
    path: bytes,
    headers: RawHeaders,
    body: bytes,
    timeout_ms: int,
    serving: bytes,
) -> CallArgs:
    """The checks of a `Call`, on its fields as UTF-8 bytes: method default GET, upper-cased;
    path from '/', no spaces or controls; header names tokens and values latin-1 text without
    CR, LF or NUL (sent as latin-1); `serving_endpoint` as 'METHOD /route'."""
    if not upstream:
        raise BadArgument("upstream: required")
    if not method:
        method = b"GET"
    else:
        common = _COMMON_METHODS.get(method)
        if common is not None:
            method = common
        elif _METHOD.match(method):
            method = method.upper()
        else:
            raise BadArgument(f"method: {method.decode()!r} is not an HTTP method")
    if not path.startswith(b"/") or len(path) > MAX_PATH or _BAD_PATH.search(path):
        raise BadArgument("path: must start with '/' and hold no spaces or control characters")
    if headers:
        if len(headers) > MAX_HEADERS:
            raise BadArgument(f"headers: at most {MAX_HEADERS}")
        for index, (name, value) in enumerate(headers):
            if not _TOKEN.match(name):
                raise BadArgument(f"headers: {name.decode()!r} is not a header name")
            if _BAD_VALUE.search(value):
                raise BadArgument(f"headers: the value of {name.decode()!r} is not a header value")
            if not value.isascii():
                latin1 = _latin1(value)
                if latin1 is None:
                    raise BadArgument(
                        f"headers: the value of {name.decode()!r} is not a header value"
                    )
                headers[index] = (name, latin1)
    serving_text = ""
    if serving:
        serving_text = serving.decode()
        validate_endpoint(serving_text, "serving_endpoint")
        if not serving.isascii() and _latin1(serving) is None:  # it travels as a header value
            raise BadArgument(f"serving_endpoint: {serving_text!r} is not a header value (latin-1)")
    return CallArgs(upstream.decode(), method, path, headers, body, timeout_ms, serving_text)


def _latin1(text: bytes) -> bytes | None:
    """UTF-8 text as latin-1 (as a header carries it); None beyond latin-1."""
    try:
        return text.decode().encode("latin-1")
    except UnicodeEncodeError:
        return None


def encode_call_response(status: int, headers: RawHeaders, body: bytes) -> bytes:
    """A `CallResponse` serialized, straight from the upstream's raw response.

    What `CallResponse(status, headers=[Header(name.lower(), value)], body)` serializes to,
    byte for byte (tests/sidecar_grpc/test_call_codec.py), without building a message object
    per header: names lower-cased, latin-1 text as UTF-8, fields in number order, defaults
    (0, empty) left out.
    """
    parts = [_STATUS_FIELDS.get(status) or (b"\x08" + _varint(status) if status else b"")]
    for name, value in headers:
        size_name, size_value = len(name), len(value)
        # The common header: ASCII, short, neither part empty. Pieces from tables, one join
        # at the end: no format string parsed per header (`parts.append` is a native call,
        # a bound `append` would not be).
        if size_value and size_name + size_value < 124 and value.isascii():
            # A name servers commonly send comes from a table, its length byte and lower-cased
            # spelling made once: no new bytes object per header.
            named = _NAME_PIECES.get(name)
            if named is None and size_name and name.isascii():
                named = _BYTE[size_name] + name.lower()
            if named is not None:
                parts.append(_HEADER_OPENING[size_name + size_value + 4])
                parts.append(named)
                parts.append(_VALUE_OPENING[size_value])
                parts.append(value)
                continue
        parts.append(_header_field(name, value))
    size = len(body)
    if size:
        parts.append(_BODY_OPENING[size] if size < 128 else b"\x1a" + _varint(size))
        parts.append(body)
    return b"".join(parts)


def _header_field(name: bytes, value: bytes) -> bytes:
    """A `Header` as field 2 of `CallResponse`, any length or text (latin-1 as UTF-8)."""
    name = name.lower() if name.isascii() else name.decode("latin-1").lower().encode()
    if not value.isascii():
        value = value.decode("latin-1").encode()
    header = _field(0x0A, name) + _field(0x12, value)
    return b"\x12" + _varint(len(header)) + header


def _field(tag: int, data: bytes) -> bytes:
    """A length-delimited field; nothing for empty data (proto3 leaves defaults out)."""
    return bytes((tag,)) + _varint(len(data)) + data if data else b""


def _varint(number: int) -> bytes:
    """A protobuf base-128 varint (non-negative numbers)."""
    if number < 128:
        return bytes((number,))
    out = bytearray()
    while number >= 128:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


# Field 2 (a `Header`) of `size` bytes and its first field's tag; a byte; Header.value's tag
# and a length: every short header's framing, made once (sizes below 128: one-byte varints).
_HEADER_OPENING: Final = tuple(b"\x12" + bytes((size,)) + b"\x0a" for size in range(128))
_BYTE: Final = tuple(bytes((size,)) for size in range(128))
_VALUE_OPENING: Final = tuple(b"\x12" + bytes((size,)) for size in range(128))
_BODY_OPENING: Final = tuple(b"\x1a" + bytes((size,)) for size in range(128))
# Response header names as servers commonly spell them (capitalised as below, lower- or
# upper-cased), each with its length byte and lower-cased spelling: Header.name's length and
# bytes, made once.
_COMMON_NAMES: Final = (
    b"Accept-Ranges", b"Age", b"Cache-Control", b"Connection", b"Content-Encoding",
    b"Content-Language", b"Content-Length", b"Content-Location", b"Content-Type", b"Date",
    b"ETag", b"Expires", b"Keep-Alive", b"Last-Modified", b"Location", b"Retry-After",
    b"Server", b"Set-Cookie", b"Traceparent", b"Transfer-Encoding", b"Vary", b"Via",
    b"X-Content-Type-Options", b"X-Request-Id",
)  # fmt: skip
_NAME_PIECES: Final = {
    spelling: _BYTE[len(name)] + name.lower()
    for name in _COMMON_NAMES
    for spelling in (name, name.lower(), name.upper())
}
# `status = n` as field 1, made once for every HTTP status.
_STATUS_FIELDS: Final = {status: b"\x08" + _varint(status) for status in range(100, 1000)}
