"""Body framing, decided here and nowhere else (RFC 9112 §6): how long a message body is, and
which header combinations a proxy must refuse because two parsers could read them differently.

Sans-I/O, like h11's `_body_framing`: functions over header values and flags, no sockets. The
server connection, the upstream connection, the exchange and the upstream client call them and
carry the answer out. A body length is an `int` (bytes), `CHUNKED`, `UNTIL_CLOSE`, or `None`
(no framing header at all: no body for a request).

Refused (400, connection closed), because a front and a back parser could disagree on where
the next request starts (request smuggling):

- Content-Length together with Transfer-Encoding;
- Content-Length headers that differ, or one that is not a plain number;
- Transfer-Encoding repeated, or anything but `chunked`;
- a protocol upgrade request with a body (the parser hands the body to the new protocol).

The chunked coding itself (chunk sizes, extensions, trailers) is llhttp's to parse: a bad chunk
size is a parse error, answered 400 after the complete requests before it (connection.py).
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CHUNKED",
    "UNTIL_CLOSE",
    "FramingError",
    "client_response_framing",
    "forward_request_framing",
    "request_framing",
    "response_framing",
    "upgrade_requested",
    "whole_body_framing",
]

CHUNKED: Final = -1  # chunked transfer coding: the body ends with the last chunk
UNTIL_CLOSE: Final = -2  # (responses only) the body ends when the connection closes

# Statuses whose response has no body besides 1xx (compared in turn, not looked up in a set:
# compiled, a set look-up boxes the status and runs the set's code for every response).
_NO_CONTENT: Final = 204
_NOT_MODIFIED: Final = 304
# The content-length line of the last length relayed: responses repeat a few lengths, and
# formatting the number runs the int-to-decimal code for every response.
_LAST_LENGTH: Final[list[tuple[int, bytes]]] = [(-1, b"")]  # no length is -1
_BODY_METHODS: Final = frozenset({b"POST", b"PUT", b"PATCH"})


class FramingError(ValueError):
    """The framing headers cannot be trusted: answer `status` (a request) and close."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# -- requests, as a server reads them ----------------------------------------------------------


def request_framing(
    lengths: list[bytes] | None, encodings: list[bytes] | None, upgrade: bool = False
) -> int | None:
    """The body of a request: its length, CHUNKED, or None (no framing header, no body).

    `lengths` and `encodings` are every Content-Length and Transfer-Encoding value received
    (None when there was none); `upgrade` says the request asks for a protocol upgrade.
    """
    length: int | None
    if encodings is not None:
        if len(encodings) > 1:
            raise FramingError("repeated transfer-encoding header")
        if lengths is not None:
            raise FramingError("both content-length and transfer-encoding")
        if encodings[0].strip().lower() != b"chunked":
            raise FramingError("unsupported transfer-encoding")
        length = CHUNKED
    elif lengths is not None:
        first = lengths[0].strip()
        for other in lengths[1:]:
            if other.strip() != first:
                raise FramingError("conflicting content-length headers")
        length = length_value(first)
        if length < 0:
            raise FramingError("invalid content-length")
    else:
        return None
    if upgrade and length != 0:
        raise FramingError("a protocol upgrade request must not have a body")
    return length


def upgrade_requested(connection: list[bytes], upgrade: bytes | None) -> bool:
    """Whether a request asks for a protocol upgrade (`Connection: upgrade` + `Upgrade`)."""
    if upgrade is None:
        return False
    return any(t.strip().lower() == b"upgrade" for value in connection for t in value.split(b","))


def forward_request_framing(length: int | None) -> bytes:
    """The framing header line of a request forwarded as it arrives (re-chunked if chunked)."""
    if length is None:
        return b""
    if length == CHUNKED:
        return b"transfer-encoding: chunked\r\n"
    return b"content-length: %d\r\n" % length


def whole_body_framing(method: bytes, size: int) -> bytes:
    """The framing header line of a request whose whole body is at hand."""
    if size or method in _BODY_METHODS:
        return b"content-length: %d\r\n" % size
    return b""


# -- responses, as the upstream client reads them ---------------------------------------------


def length_value(digits: bytes) -> int:
    """The number a Content-Length value spells, or -1 unless it is one or more ASCII digits
    (what `bytes.isdigit` accepts). One pass: compiled, the loop costs a tenth of `int(bytes)`
    and `isdigit`, generic calls each. Long runs take `int` (no quadratic loop)."""
    if len(digits) > 18:
        return int(digits) if digits.isdigit() else -1
    if not digits:
        return -1
    value = 0
    for digit in digits:
        if digit < 48 or digit > 57:
            return -1
        value = value * 10 + digit - 48
    return value


def response_framing(
    status: int, head_request: bool, lengths: list[bytes], chunked: bool
) -> tuple[int | None, int]:
    """How an upstream's response is framed: (its declared Content-Length or None, how its body
    is delimited: a length, 0 for none, CHUNKED or UNTIL_CLOSE).

    Differing or non-numeric lengths are an invalid response (FramingError). With chunked
    coding a Content-Length is ignored (RFC 9112 §6.3); a response to HEAD, a 1xx, 204 or 304
    has no body whatever it declares (the declared length names the would-be body).
    """
    length: int | None = None
    if lengths and not chunked:
        first = lengths[0]
        length = length_value(first)
        if length < 0:  # strip only when needed: a method call per response
            first = first.strip()
            length = length_value(first)
        if length < 0 or (
            len(lengths) > 1 and any(other.strip() != first for other in lengths[1:])
        ):
            raise FramingError("invalid content-length", 502)
    if head_request or status in (_NO_CONTENT, _NOT_MODIFIED) or status < 200:
        return length, 0
    if chunked:
        return None, CHUNKED
    if length is None:
        return None, UNTIL_CLOSE
    return length, length


# -- responses, as the proxy relays them to a client ------------------------------------------


def client_response_framing(
    status: int, head_request: bool, length: int | None, http10: bool, keep_alive: bool
) -> tuple[bytes, bool, bool]:
    """The framing header lines of a response relayed to a client: (lines, chunked, keep_alive).

    A declared length passes through (also for HEAD, 204 and 304, where it names the would-be
    body); an undelimited body is chunked for HTTP/1.1 clients and runs until close for
    HTTP/1.0 ones, whose connection then cannot be kept.
    """
    no_body = head_request or status in (_NO_CONTENT, _NOT_MODIFIED)
    chunked = False
    if length is not None:
        last = _LAST_LENGTH[0]
        if last[0] == length:
            framing = last[1]
        else:
            framing = b"content-length: %d\r\n" % length
            _LAST_LENGTH[0] = (length, framing)
    elif no_body:
        framing = b""
    elif not http10:
        framing = b"transfer-encoding: chunked\r\n"
        chunked = True
    else:
        framing = b""
        keep_alive = False
    if not keep_alive:
        framing += b"connection: close\r\n"
    elif http10:
        framing += b"connection: keep-alive\r\n"  # HTTP/1.0 closes unless told otherwise
    return framing, chunked, keep_alive
