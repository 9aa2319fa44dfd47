"""Property: whatever bytes follow a run of valid pipelined requests, however they are split
into reads and however slowly the responses come, every valid request is answered, in order,
and at most one error reply ends the stream (the server connection, no sockets)."""

from __future__ import annotations

import itertools
import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cascadebreaker.sidecar.http.connection import ServerConnection
from cascadebreaker.sidecar.http.exchange import RequestHead
from cascadebreaker.sidecar.http.limits import ConnectionTracker, Limits


class _Transport:
    """A transport that keeps what is written and obeys pause/resume."""

    def __init__(self) -> None:
        self.written = b""
        self.reading = True
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.written += data

    def writelines(self, pieces: Any) -> None:
        self.write(b"".join(pieces))

    def get_extra_info(self, key: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if key == "peername" else default

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True


class _SlowUpstream:
    """Answers `200 <target>` once the request is complete, its turn has come, and the test
    lets it (`finish_one`)."""

    def __init__(self) -> None:
        self.ready: list[_Exchange] = []

    def handle(self, conn: ServerConnection, request: RequestHead) -> _Exchange:
        return _Exchange(self, conn, request)

    def finish_one(self) -> bool:
        if not self.ready:
            return False
        self.ready.pop(0).finish()
        return True


class _Exchange:
    def __init__(self, upstream: _SlowUpstream, conn: ServerConnection, req: RequestHead) -> None:
        self.upstream = upstream
        self.conn = conn
        self.request = req
        self.started = False
        self.complete = False
        self.done = False

    def start(self) -> None:
        self.started = True
        self._maybe_ready()

    def request_body(self, data: bytes) -> None:
        pass

    def request_end(self) -> None:
        self.complete = True
        self._maybe_ready()

    def _maybe_ready(self) -> None:
        if self.started and self.complete:
            self.upstream.ready.append(self)

    def finish(self) -> None:
        if self.done:
            return
        self.done = True
        body = self.request.target
        self.conn.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body))
        self.conn.response_done(self, True)

    def downstream_writable(self, writable: bool) -> None:
        pass

    def connection_lost(self) -> None:
        self.done = True

    def request_failed(self, outcome: str) -> bool:
        self.done = True
        return True


_GOOD = st.sampled_from(
    [
        b"GET /a%d HTTP/1.1\r\nhost: x\r\n\r\n",
        b"POST /b%d HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\nabc",
        b"PUT /c%d HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
        b"GET /d%d HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: h2c\r\n\r\n",
    ]
)
_NOISE = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([b"X", b"\x00garbage", b"GET / HTTP/9\r\n\r\n", b"zz\r\n", b"\r\n"]),
)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    requests=st.lists(_GOOD, min_size=1, max_size=5),
    noise=_NOISE,
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=6),
    eager=st.booleans(),
)
async def test_every_valid_request_before_bad_bytes_is_answered(
    requests: list[bytes], noise: bytes, cuts: list[int], eager: bool
) -> None:
    good = [template % i for i, template in enumerate(requests)]
    stream = b"".join(good) + noise
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    pieces = [stream[a:b] for a, b in itertools.pairwise(bounds)]
    upstream = _SlowUpstream()
    conn = ServerConnection(upstream, Limits(), ConnectionTracker())
    transport = _Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]  # a stand-in transport
    while pieces and not transport.closed:
        if eager:
            while upstream.finish_one():
                pass
            if transport.closed:
                break
        if transport.reading:
            conn.data_received(pieces.pop(0))
        else:
            assert upstream.finish_one(), "paused with nothing left to answer: stuck"
    while upstream.finish_one():
        pass
    answered = re.findall(rb"HTTP/1\.1 (\d{3}) [^\r]*\r\n(?:[^\r]+\r\n)*\r\n", transport.written)
    targets = re.findall(rb"content-length: \d+\r\n\r\n(/[a-d]\d+)", transport.written)
    assert targets[: len(good)] == [re.split(rb" ", g, maxsplit=2)[1] for g in good]
    errors = [status for status in answered if not status.startswith(b"2")]
    assert len(errors) <= 1
    if errors:
        assert transport.closed
        assert answered[-1] == errors[0]  # the error reply is the last word
