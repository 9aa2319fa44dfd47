"""HTTP/1.1 wire helpers: hop-by-hop filtering (RFC 9110 §7.6.1), heads, framing, error replies."""

from __future__ import annotations

import json
import types
from collections.abc import Sequence
from http import HTTPStatus
from typing import Any, Final

RawHeaders = list[tuple[bytes, bytes]]

# Headers that describe one connection, never forwarded; plus the ones the sidecar re-derives
# (framing, Host) or answers itself (Expect).
HOP_BY_HOP: Final = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
_REDERIVED: Final = frozenset({b"content-length", b"host", b"expect"})
_DROP_FORWARD: Final = HOP_BY_HOP | _REDERIVED

# What a header is to the proxy. `header_kind` classifies a name without hashing it (a fresh
# bytes object each time, so siphash each time): the length picks the one or two special names
# it could be, and only a name whose initial matches is compared, first as spelled in lower and
# in Title-Case, then lower-cased.
END_TO_END: Final = 0
CONTENT_LENGTH: Final = 1
TRANSFER_ENCODING: Final = 2
CONNECTION: Final = 3
HOST: Final = 4
EXPECT: Final = 5
HOP: Final = 6  # other hop-by-hop headers: dropped
UPGRADE: Final = 7  # hop-by-hop, but read: a WebSocket handshake becomes a tunnel


def _spelled(name: bytes, lower: bytes, title: bytes) -> bool:
    """`name` is `lower` in any ASCII case (`name` and `lower` are of one length)."""
    # `| 0x20` lower-cases a letter; a non-letter that it maps on one fails below.
    return name[0] | 0x20 == lower[0] and (name in (lower, title) or name.lower() == lower)


def header_kind(name: bytes) -> int:
    """The kind of a header name, in any case (ASCII, as `bytes.lower`)."""
    # Compiled, each test of the length is one machine compare: names of no special length
    # (Date, Server, Content-Type, ...) cost a few instructions.
    size = len(name)
    if size == 4:
        return HOST if _spelled(name, b"host", b"Host") else END_TO_END
    if size == 14:
        if _spelled(name, b"content-length", b"Content-Length"):
            return CONTENT_LENGTH
        return END_TO_END
    if size == 10:
        if _spelled(name, b"connection", b"Connection"):
            return CONNECTION
        return HOP if _spelled(name, b"keep-alive", b"Keep-Alive") else END_TO_END
    if size == 17:
        if _spelled(name, b"transfer-encoding", b"Transfer-Encoding"):
            return TRANSFER_ENCODING
        return END_TO_END
    if size == 7:
        if _spelled(name, b"upgrade", b"Upgrade"):
            return UPGRADE
        return HOP if _spelled(name, b"trailer", b"Trailer") else END_TO_END
    if size == 6:
        return EXPECT if _spelled(name, b"expect", b"Expect") else END_TO_END
    if size == 2:
        return HOP if _spelled(name, b"te", b"Te") else END_TO_END
    if size == 16:
        return HOP if _spelled(name, b"proxy-connection", b"Proxy-Connection") else END_TO_END
    if size == 18:
        return HOP if _spelled(name, b"proxy-authenticate", b"Proxy-Authenticate") else END_TO_END
    if size == 19:
        return HOP if _spelled(name, b"proxy-authorization", b"Proxy-Authorization") else END_TO_END
    return END_TO_END


# How the per-header callbacks classify: compiled (mypyc), by `header_kind` (~165 instructions
# a header against ~430 for a dict look-up of the fresh name); interpreted, by the cache of
# kind_cache.py (a dict subscript in C costs less than the Python of `header_kind`).
COMPILED: Final = not isinstance(header_kind, types.FunctionType)


# Connection values that name no other header, as commonly spelled: skipped where read, so
# the usual `Connection: keep-alive` costs no token parsing.
PLAIN_CONNECTION: Final = frozenset({b"keep-alive", b"Keep-Alive", b"close", b"Close", b""})


def plain_connection(value: bytes) -> bool:
    """`value in PLAIN_CONNECTION`, by length and bytes: a fresh value is not hashed (a set
    look-up would run siphash over it, and the set's code besides)."""
    size = len(value)
    if size == 10:
        return value == b"keep-alive" or value == b"Keep-Alive"
    if size == 5:
        return value == b"close" or value == b"Close"
    return size == 0


def drop_connection_tokens(headers: RawHeaders, connection_values: list[bytes]) -> RawHeaders:
    """Remove headers that Connection lists as hop-by-hop (close/keep-alive name none)."""
    tokens = {t.strip().lower() for value in connection_values for t in value.split(b",")}
    tokens -= {b"close", b"keep-alive", b"upgrade", b""}
    if not tokens:
        return headers
    return [(n, v) for n, v in headers if n.lower() not in tokens]


CRLF: Final = b"\r\n"
# Heads, by build. Compiled, `b"%b: %b\r\n" % (name, value)` of bytes is one allocation and a
# copy of each piece (no format parsing): a line a header, appended and joined, costs less than
# four pieces a header. Interpreted, `%` parses its format each time and every append is a
# method call: the lines are made by joins that run in C (`name: value`, CRLF between), no
# Python per header. Each way measured cheaper only in its own build.
_NAME_VALUE: Final = b": ".join
LAST_CHUNK: Final = b"0\r\n\r\n"


def connection_tokens(headers: RawHeaders) -> frozenset[bytes]:
    """Lower-cased tokens of every Connection header (they name more hop-by-hop headers)."""
    tokens: set[bytes] = set()
    for name, value in headers:
        if len(name) == 10 and name.lower() == b"connection":
            tokens.update(t.strip().lower() for t in value.split(b","))
    return frozenset(tokens)


def forwardable(headers: RawHeaders, has_connection: bool) -> RawHeaders:
    """The end-to-end headers of a message: hop-by-hop ones, framing, Host and Expect removed."""
    drop: frozenset[bytes] = _DROP_FORWARD
    if has_connection:
        drop = drop | connection_tokens(headers)
    return [(n, v) for n, v in headers if n.lower() not in drop]


def request_head(
    method: bytes,
    target: bytes,
    host: bytes,
    headers: RawHeaders,
    framing: bytes,
    lines: bytes = b"",
    more_lines: bytes = b"",
) -> bytes:
    """Serialise a request head; `framing` is a ready `content-length: n\\r\\n` line or empty,
    `lines` and `more_lines` ready header lines (`via: ...\\r\\n`) to put before it."""
    if COMPILED:  # a list, not any iterable: compiled, its loop indexes it natively
        out = [b"%b %b HTTP/1.1\r\nhost: %b\r\n" % (method, target, host)]
        for name, value in headers:
            out.append(b"%b: %b\r\n" % (name, value))
        out.append(lines)
        if more_lines:  # most requests have none: no element for the join to copy
            out.append(more_lines)
        out.append(framing)
        out.append(CRLF)
        return b"".join(out)
    joined = CRLF.join(map(_NAME_VALUE, headers))
    end = CRLF if joined else b""
    return b"".join(
        (
            method,
            b" ",
            target,
            b" HTTP/1.1\r\nhost: ",
            host,
            CRLF,
            joined,
            end,
            lines,
            more_lines,
            framing,
            CRLF,
        )
    )


_REASONS: Final = {s.value: s.phrase.encode() for s in HTTPStatus}


# The last status line made for each status, with the reason it was asked for: upstreams send
# the same few, so each line is formatted once. Statuses are 3 digits: at most 900 entries.
_STATUS_LINES: Final[dict[int, tuple[bytes, bytes]]] = {}
# The very last line made, asked first: compared, a status needs no boxing and no hashing.
_LAST_STATUS: Final[list[tuple[int, bytes, bytes]]] = [(-1, b"", b"")]  # no status is -1


def status_line(status: int, reason: bytes = b"") -> bytes:
    """`HTTP/1.1 <status> <reason>\\r\\n`, with the standard reason when none is given."""
    last = _LAST_STATUS[0]
    if last[0] == status and last[1] == reason:
        return last[2]
    made = _STATUS_LINES.get(status)
    if made is not None and made[0] == reason:
        _LAST_STATUS[0] = (status, reason, made[1])
        return made[1]
    line = b"HTTP/1.1 %d %s\r\n" % (status, reason or _REASONS.get(status, b"Unknown"))
    if 100 <= status <= 999:
        _STATUS_LINES[status] = (reason, line)
        _LAST_STATUS[0] = (status, reason, line)
    return line


def response_head(
    status: int, reason: bytes, headers: RawHeaders, framing: bytes, lines: bytes = b""
) -> bytes:
    """Serialise a response head; `framing` carries content-length/transfer-encoding/connection,
    `lines` ready header lines (`via: ...\\r\\n`) to put before it."""
    if COMPILED:
        out = [status_line(status, reason)]
        for name, value in headers:
            out.append(b"%b: %b\r\n" % (name, value))
        out.append(lines)
        out.append(framing)
        out.append(CRLF)
        return b"".join(out)
    joined = CRLF.join(map(_NAME_VALUE, headers))
    end = CRLF if joined else b""
    return b"".join((status_line(status, reason), joined, end, lines, framing, CRLF))


def chunk(data: bytes) -> list[bytes]:
    """One chunk of a chunked body, as pieces for `writelines`."""
    return [b"%x\r\n" % len(data), data, CRLF]


def simple_response(
    status: int,
    body: bytes,
    content_type: bytes = b"application/json",
    extra: Sequence[tuple[bytes, bytes]] = (),
    close: bool = False,
) -> bytes:
    """A complete response with a fixed body (errors, admin replies)."""
    headers = [(b"content-type", content_type), *extra]
    framing = b"content-length: %d\r\n" % len(body)
    if close:
        framing += b"connection: close\r\n"
    return response_head(status, b"", headers, framing) + body


def json_response(
    status: int,
    payload: dict[str, Any],
    extra: Sequence[tuple[bytes, bytes]] = (),
    close: bool = False,
) -> bytes:
    """A complete JSON response."""
    body = json.dumps(payload, separators=(",", ":")).encode()
    return simple_response(status, body, b"application/json", extra, close)


def error_response(status: int, message: str, close: bool = False, **fields: Any) -> bytes:
    """A JSON error reply: `{"error": message, ...fields}`."""
    return json_response(status, {"error": message, **fields}, close=close)


def unconnected(data: bytes) -> None:
    """A connection's bound write before it has a transport (never reached: writes check the
    transport first)."""
