"""Fuzz targets for HTTP/1.1 framing: the sidecar's request reader and its response framing.

- `request_stream`: valid requests (Content-Length, chunked, none; pipelined) followed by
  arbitrary bytes, fed to `RequestReader` (httptools + framing.py, no sockets) in arbitrary
  pieces. Every valid request must come out whole and in order (method, target, body) before
  anything else happens, and the only errors are the reader's own (a lost valid request or any
  other exception is a defect).
- `response_framing`: a response as an upstream may send it (status, HEAD or not, declared
  lengths, chunked) through `response_framing`, then relayed with `client_response_framing`
  and parsed back by an HTTP client parser: the client must read exactly the body the upstream
  sent, and only `FramingError` may refuse a response.
"""

from __future__ import annotations

from types import SimpleNamespace

import httptools

from bench.fuzz.draw import Draw
from cascadebreaker.sidecar.http.exchange import RequestHead
from cascadebreaker.sidecar.http.framing import (
    CHUNKED,
    UNTIL_CLOSE,
    FramingError,
    client_response_framing,
    response_framing,
)
from cascadebreaker.sidecar.http.limits import Limits
from cascadebreaker.sidecar.http.reader import RequestReader

__all__ = ["request_stream", "response_relay"]


_TOKEN = b"abcdefghijklmnopqrstuvwxyz0123456789-"
_PATH = _TOKEN + b"/._~%!$&'()*+,;=:@?"


def _text(source: Draw, alphabet: bytes, size: int) -> bytes:
    return bytes(alphabet[b % len(alphabet)] for b in source.take(1 + source.byte() % size))


def _request(source: Draw) -> tuple[bytes, bytes, bytes, bytes]:
    """(raw bytes, method, target, body) of one valid HTTP/1.1 request."""
    method = (b"GET", b"POST", b"PUT", b"DELETE", b"PATCH", b"OPTIONS")[source.byte() % 6]
    target = b"/" + _text(source, _PATH, 60)
    headers = [b"host: " + _text(source, _TOKEN, 20)]
    for _ in range(source.byte() % 4):
        # x-: never a framing or hop-by-hop header (those are the noise's to send)
        headers.append(b"x-" + _text(source, _TOKEN, 12) + b": " + _text(source, _PATH, 30))
    framing = source.byte() % 3
    body = source.take(source.byte() % 64 if framing else 0)
    if framing == 1:
        headers.append(b"content-length: %d" % len(body))
        encoded = body
    elif framing == 2:
        headers.append(b"transfer-encoding: chunked")
        pieces = [body[i : i + 7] for i in range(0, len(body), 7)]
        encoded = b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    else:
        encoded = b""
    raw = b"%b %b HTTP/1.1\r\n%b\r\n\r\n%b" % (method, target, b"\r\n".join(headers), encoded)
    return raw, method, target, body


class _Recorder(RequestReader):
    """The reader with its three steps recording what came out."""

    def __init__(self) -> None:
        super().__init__(Limits(32768, 100))
        self.tracker = SimpleNamespace(draining=False)  # type: ignore[assignment]
        self.client = "fuzz"
        self.loop = SimpleNamespace(time=lambda: 0.0)  # type: ignore[assignment]
        self._now = self.loop.time
        self.requests: list[list[object]] = []  # [head, body, complete]

    def feed(self, data: bytes) -> None:
        self._parser.feed_data(data)

    def _head_received(self, request: RequestHead) -> None:
        self.requests.append([request, b"", False])

    def _body_received(self, data: bytes) -> None:
        body = self.requests[-1][1]
        assert isinstance(body, bytes)
        self.requests[-1][1] = body + data

    def _request_complete(self) -> None:
        self.requests[-1][2] = True


def request_stream(data: bytes) -> None:
    """Valid pipelined requests, then noise, in pieces: every valid one comes out whole."""
    source = Draw(data)
    valid = [_request(source) for _ in range(1 + source.byte() % 3)]
    cuts = sorted(source.byte() * 7 for _ in range(source.byte() % 5))
    stream = b"".join(raw for raw, _, _, _ in valid) + source.rest()
    reader = _Recorder()
    start = 0
    try:
        for cut in [*cuts, len(stream)]:
            if cut > start:
                reader.feed(stream[start:cut])
                start = cut
    except (httptools.HttpParserError, httptools.HttpParserUpgrade, FramingError):
        pass  # the noise: the connection answers 400 (or tunnels) after the valid ones
    got = reader.requests[: len(valid)]
    assert len(got) == len(valid), f"lost a valid request: {len(got)} of {len(valid)}"
    for (_, method, target, body), (head, received, complete) in zip(valid, got, strict=True):
        assert isinstance(head, RequestHead)
        assert (head.method, head.target, received, complete) == (method, target, body, True)


def response_relay(data: bytes) -> None:
    """An upstream's response, framed by the sidecar for its client, parsed back whole."""
    source = Draw(data)
    status = (200, 201, 204, 206, 301, 304, 400, 404, 500, 503)[source.byte() % 10]
    head_request = source.byte() % 5 == 0
    chunked = source.byte() % 3 == 0
    body = source.take(source.byte() % 100)
    lengths = [_length(source, len(body)) for _ in range(source.byte() % 3)]
    try:
        declared, delimited = response_framing(status, head_request, lengths, chunked)
    except FramingError as error:
        if error.status != 502:  # a bad upstream response is the upstream's fault: 502
            raise AssertionError(f"response framing refused with {error.status}") from None
        return
    if delimited == 0:  # what the upstream client reads as the body
        body = b""
    elif delimited > 0:
        body = body[:delimited].ljust(delimited, b"x")
    else:
        assert delimited in (CHUNKED, UNTIL_CLOSE), delimited
    http10 = source.byte() % 4 == 0
    lines, rechunk, keep_alive = client_response_framing(
        status, head_request, declared, http10, keep_alive=True
    )
    no_body = head_request or status in (204, 304)
    # A kept-alive response must end by itself, or the next one would be read as its body.
    assert not keep_alive or declared is not None or rechunk or no_body, (status, lines)
    if head_request:
        return  # the client's parser would need to know it asked HEAD: the rule above suffices
    sent = b"" if no_body else body
    if rechunk:
        pieces = [sent[i : i + 9] for i in range(0, len(sent), 9)]
        payload = b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    else:
        payload = sent
    received: list[bytes] = []
    done: list[bool] = []
    parser = httptools.HttpResponseParser(
        SimpleNamespace(on_body=received.append, on_message_complete=lambda: done.append(True))
    )
    parser.feed_data(b"HTTP/1.1 %d X\r\n%b\r\n%b" % (status, lines, payload))
    assert b"".join(received) == sent, (status, lines, sent, received)
    if keep_alive:
        assert done, ("a kept-alive response did not end", status, lines)


def _length(source: Draw, actual: int) -> bytes:
    """A Content-Length value: usually the body's, sometimes odd."""
    kind = source.byte() % 6
    if kind < 3:
        return b"%d" % actual
    if kind == 3:
        return b" %d " % actual
    return _text(source, b"0123456789-+ xa", 6)
