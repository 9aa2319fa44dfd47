"""Pure pieces of the sidecar: config validation, target resolution, route templates, budget."""

from __future__ import annotations

import asyncio
import bisect
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cascadebreaker.sidecar.http import wire
from cascadebreaker.sidecar.http.connection import ServerConnection
from cascadebreaker.sidecar.http.exchange import RequestHead
from cascadebreaker.sidecar.http.framing import client_response_framing
from cascadebreaker.sidecar.http.kind_cache import HEADER_KINDS
from cascadebreaker.sidecar.http.limits import ConnectionTracker, Limits
from cascadebreaker.sidecar.http.wire import (
    CONNECTION,
    CONTENT_LENGTH,
    END_TO_END,
    EXPECT,
    HOP,
    HOST,
    TRANSFER_ENCODING,
    UPGRADE,
    drop_connection_tokens,
    header_kind,
    request_head,
    response_head,
    status_line,
)
from cascadebreaker.sidecar.proxy.endpoint_hint import endpoint_hint, route_template
from cascadebreaker.sidecar.proxy.listeners import split_outbound_target
from cascadebreaker.sidecar.proxy.routes import RetryBudget
from cascadebreaker.sidecar.proxy.stats import LATENCY_BOUNDS, OUTCOMES, RouteStats
from cascadebreaker.sidecar.schema import ConfigError, load_config, parse_config
from cascadebreaker.sidecar.upstream import UpstreamConnection, UpstreamPool, UpstreamTarget

MINIMAL: dict[str, Any] = {
    "service": "checkout",
    "app": "http://127.0.0.1:8000",
    "upstreams": {
        "payment": {
            "url": "http://127.0.0.1:9001",
            "timeout": 2.0,
            "breaker": {"failure_threshold": 5, "recovery_timeout": 20},
        }
    },
}


def test_issue_example_config_loads(tmp_path: Path) -> None:
    path = tmp_path / "sidecar.yaml"
    path.write_text(
        "service: checkout\n"
        "app: http://127.0.0.1:8000\n"
        "listen:\n"
        "  outbound: 127.0.0.1:15001\n"
        "  inbound: 127.0.0.1:15006\n"
        "  grpc: 127.0.0.1:15002\n"
        "  admin: 127.0.0.1:15000\n"
        "store: memory\n"
        "upstreams:\n"
        "  payment:\n"
        "    url: http://127.0.0.1:9001\n"
        "    timeout: 2.0\n"
        "    breaker: {failure_threshold: 5, recovery_timeout: 20}\n"
    )
    config = load_config(path)
    assert config.service == "checkout"
    assert str(config.listen.outbound) == "127.0.0.1:15001"
    payment = config.upstreams["payment"]
    assert (payment.timeout, payment.breaker.failure_threshold) == (2.0, 5)
    assert payment.retries.attempts == 0  # retries are off unless configured
    table = payment.failure_table()
    assert table[500] and table[599] and not table[404] and not table[200]


def test_failure_statuses_may_name_4xx() -> None:
    config = parse_config(
        {
            **MINIMAL,
            "upstreams": {"p": {"url": "http://127.0.0.1:1", "failure_statuses": ["5xx", 429]}},
        }
    )
    table = config.upstreams["p"].failure_table()
    assert table[429] and table[503] and not table[404]


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        (
            {"upstreams": {"p": {"url": "http://h:1", "timeout": -1}}},
            "upstreams.p.timeout: must be > 0",
        ),
        (
            {"upstreams": {"p": {"url": "http://h:1", "failure_statuses": ["6xx"]}}},
            "upstreams.p.failure_statuses",
        ),
        ({"upstreams": {"p q": {"url": "http://h:1"}}}, "upstreams"),
        ({"limits": {"max_header_count": 0}}, "limits.max_header_count: must be >= 1"),
        ({"listen": {"admin": "127.0.0.1:99999"}}, "listen.admin.port"),
        ({"surprise": 1}, "surprise: unknown key"),
        (
            {"upstreams": {"p": {"url": "http://h:1", "retries": {"attempts": 2, "tries": 1}}}},
            "upstreams.p.retries.tries: unknown key",
        ),
        (
            {"upstreams": {"p": {"urls": ["http://h:1", "ftp://h:2"]}}},
            "upstreams.p.urls: item 1 must be an http:// URL",
        ),
        ({"upstreams": {"p": {"urls": ["http://h:1", "http://h:1"]}}}, "upstreams.p.urls"),
        (
            {"upstreams": {"p": {"url": "http://h:3", "urls": ["http://h:1"]}}},
            "upstreams.p: give url or urls, not both",
        ),
        ({"upstreams": {"p": {"urls": []}}}, "upstreams.p.url"),
    ],
)
def test_invalid_config_names_the_key(patch: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config({**MINIMAL, **patch})
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_urls_list_every_instance_of_an_upstream() -> None:
    config = parse_config(
        {**MINIMAL, "upstreams": {"p": {"urls": ["http://h:1", "http://h:2/base"]}}}
    )
    upstream = config.upstreams["p"]
    assert upstream.url == "http://h:1"
    assert upstream.instance_urls() == ("http://h:1", "http://h:2/base")
    single = parse_config({**MINIMAL, "upstreams": {"p": {"url": "http://h:1"}}})
    assert single.upstreams["p"].instance_urls() == ("http://h:1",)


def test_not_a_mapping_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(path)


def _request(target: bytes, host: bytes = b"") -> RequestHead:
    request = RequestHead(b"GET", target, [])
    request.host = host
    return request


@pytest.mark.parametrize(
    ("target", "host", "expected"),
    [
        (b"/payment/v1/charges", b"127.0.0.1:15001", (b"payment", b"/v1/charges")),
        (b"/payment", b"", (b"payment", b"/")),
        (b"/payment?x=1", b"", (b"payment", b"/?x=1")),
        (b"/payment?x=1/y", b"", (b"payment", b"/?x=1/y")),
        (b"/?x", b"", (b"", b"/?x")),
        (b"//x", b"", (b"", b"/x")),
        (b"/", b"", (b"", b"/")),
        (b"/v1/charges", b"payment", (b"payment", b"/v1/charges")),
        (b"/v1/charges", b"Payment:8080", (b"payment", b"/v1/charges")),
        (b"http://payment/v1/x?y=2", b"payment", (b"payment", b"/v1/x?y=2")),
        (b"http://payment:9000", b"", (b"payment", b"/")),
        (b"HTTP://user@Payment:9000/a", b"", (b"payment", b"/a")),
        (b"https://payment/x", b"", None),
        (b"*", b"", None),
    ],
)
def test_outbound_target_resolution(
    target: bytes, host: bytes, expected: tuple[bytes, bytes] | None
) -> None:
    assert split_outbound_target(_request(target, host), {b"payment": object()}) == expected


def _first_segment_by_find(target: bytes) -> tuple[bytes, bytes]:
    """The origin form's reading, spelled with `find` (the way it was first written)."""
    end = target.find(b"/", 1)
    query = target.find(b"?", 1)
    if end < 0 or 0 < query < end:
        end = query
    if end < 0:
        end = len(target)
    path = target[end:]
    if path[:1] == b"?":
        path = b"/" + path
    return target[1:end], path or b"/"


@given(
    st.lists(st.sampled_from([b"/", b"?", b"payment", b"x", b"=", b"#"]), max_size=8),
    st.sampled_from([b"", b"bench", b"payment", b"PAYMENT:80", b"other:1"]),
)
def test_origin_form_targets_split_as_find_reads_them(pieces: list[bytes], host: bytes) -> None:
    """Any origin-form target, with or without a Host (the last one resolved remembered or
    not): the upstream named by Host, else the first segment, as `find` would split it."""
    target = b"/" + b"".join(pieces)
    for _ in range(2):  # the second time, the Host is the last one resolved
        split = split_outbound_target(_request(target, host), {b"payment": object()})
        if host.split(b":")[0].lower() == b"payment":
            assert split == (b"payment", target)
        else:
            assert split == _first_segment_by_find(target)


@pytest.mark.parametrize(
    ("method", "path", "endpoint"),
    [
        ("get", "/v1/charges/42", "GET /v1/charges/{id}"),
        ("POST", "/v1/charges", "POST /v1/charges"),
        ("GET", "/u/550e8400-e29b-41d4-a716-446655440000/cart?x=1", "GET /u/{id}/cart"),
        ("GET", "/blobs/0123456789abcdef01", "GET /blobs/{id}"),
        ("GET", "/blobs/cafe", "GET /blobs/cafe"),
        ("GET", "/", "GET /"),
        ("GET", "", "GET /"),
    ],
)
def test_endpoint_hint_folds_ids(method: str, path: str, endpoint: str) -> None:
    assert endpoint_hint(method, path) == endpoint
    assert route_template(path) == endpoint.split(" ", 1)[1]


def test_header_kinds_and_connection_tokens() -> None:
    assert header_kind(b"Content-Length") == header_kind(b"content-length") != 0
    assert header_kind(b"X-Custom") == 0
    headers = [(b"X-Trace", b"1"), (b"X-Keep", b"2"), (b"Authorization", b"t")]
    assert drop_connection_tokens(headers, [b"close, X-Trace", b" authorization "]) == [
        (b"X-Keep", b"2")
    ]
    assert drop_connection_tokens(headers, [b"keep-alive"]) is headers


_KINDS = {
    b"connection": CONNECTION,
    b"keep-alive": HOP,
    b"proxy-connection": HOP,
    b"proxy-authenticate": HOP,
    b"proxy-authorization": HOP,
    b"te": HOP,
    b"trailer": HOP,
    b"transfer-encoding": TRANSFER_ENCODING,
    b"upgrade": UPGRADE,
    b"content-length": CONTENT_LENGTH,
    b"host": HOST,
    b"expect": EXPECT,
}


@st.composite
def _header_names(draw: st.DrawFn) -> bytes:
    """Special names in random case, near misses of them, and any other bytes."""
    name = draw(st.sampled_from(sorted(_KINDS)))
    cased = bytes(c ^ 0x20 if chr(c).isalpha() and draw(st.booleans()) else c for c in name)
    if draw(st.booleans()):
        return cased
    at = draw(st.integers(0, len(cased) - 1))
    flipped = cased[:at] + bytes([cased[at] ^ draw(st.sampled_from([0x01, 0x20, 0x40, 0x80]))])
    return draw(st.sampled_from([flipped + cased[at + 1 :], cased[:at], cased + b"x"]))


@given(st.one_of(_header_names(), st.binary(max_size=24)))
def test_header_kind_is_the_kind_of_the_lower_cased_name(name: bytes) -> None:
    """Every spelling of a special name, and nothing else, is classified (ASCII case only);
    the same by the raw-spelling cache, the first time and after."""
    expected = _KINDS.get(name.lower(), END_TO_END)
    assert header_kind(name) == HEADER_KINDS[name] == HEADER_KINDS[name] == expected


def test_header_kinds_of_common_spellings() -> None:
    for lower, kind in _KINDS.items():
        assert header_kind(lower) == header_kind(lower.upper()) == kind
        assert header_kind(lower.title()) == header_kind(lower.capitalize()) == kind
    for name in (b"Date", b"Server", b"Accept", b"User-Agent", b"Content-Type", b"hosts", b""):
        assert header_kind(name) == END_TO_END
    assert header_kind("Host".encode("utf-16-le")) == END_TO_END
    assert header_kind(b"\xc8ost") == END_TO_END  # 0xc8 | 0x20 is not "h"


def test_the_build_picks_the_header_classification() -> None:
    """Compiled, the callbacks compare candidates; interpreted, they ask the cache first."""
    assert wire.COMPILED is not wire.__file__.endswith(".py")


def test_retry_budget_allows_a_ratio_plus_a_floor() -> None:
    now = [0.0]
    budget = RetryBudget(ratio=0.5, min_per_second=0.0, clock=lambda: now[0])
    spent = 0
    for _ in range(10):  # start full (cap 1), then earn half a retry per call
        budget.deposit()
        spent += budget.withdraw()
    assert spent == 5
    floor = RetryBudget(ratio=0.0, min_per_second=2.0, clock=lambda: now[0])
    taken = sum(floor.withdraw() for _ in range(100))
    assert taken == 20  # the initial bucket: ten seconds' worth
    assert not floor.withdraw()
    now[0] += 1.0
    assert floor.withdraw() and floor.withdraw() and not floor.withdraw()


class _FakeTransport:
    """Records what an UpstreamConnection does to its transport."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.reading = True
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def writelines(self, pieces: Any) -> None:
        self.written.extend(pieces)

    def get_extra_info(self, key: str, default: Any = None) -> Any:
        return default

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def close(self) -> None:
        self.closed = True


class _PausingSink:
    """Pauses its connection on the first body piece, as the proxy does for a slow client."""

    def __init__(self) -> None:
        self.conn: Any = None
        self.body = b""
        self.ended = False

    def response_head(self, *args: Any) -> None:
        pass

    def response_body(self, data: bytes) -> None:
        self.body += data
        self.conn.pause_reading()

    def response_end(self) -> None:
        self.ended = True

    def response_failed(self, error: Exception) -> None:
        raise AssertionError(error)

    def upstream_writable(self, writable: bool) -> None:
        pass


async def test_connection_paused_at_the_end_of_a_response_returns_to_the_pool_readable() -> None:
    pool = UpstreamPool(
        UpstreamTarget.from_url("p", "http://127.0.0.1:1"), asyncio.get_running_loop()
    )
    conn = UpstreamConnection(pool)
    transport = _FakeTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]  # a stand-in transport
    sink = _PausingSink()
    sink.conn = conn
    conn.send(b"GET / HTTP/1.1\r\nhost: p\r\n\r\n", sink, timeout=5)
    # Head, body and end in one read: the sink pauses mid-read, the message still completes.
    conn.data_received(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello")
    assert sink.ended
    assert sink.body == b"hello"
    assert pool.acquire_nowait() is conn
    assert transport.reading  # the next exchange can read its response
    pool.close()


class _BackpressuredExchange:
    """Pauses the client for upstream backpressure, then finishes without resuming it."""

    def __init__(self, conn: ServerConnection) -> None:
        self.conn = conn

    def start(self) -> None:
        self.conn.pause_reading(2)

    def request_body(self, data: bytes) -> None:
        pass

    def request_end(self) -> None:
        self.conn.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        self.conn.response_done(self, True)

    def downstream_writable(self, writable: bool) -> None:
        pass

    def connection_lost(self) -> None:
        pass


class _Handler:
    def handle(self, conn: ServerConnection, request: RequestHead) -> _BackpressuredExchange:
        return _BackpressuredExchange(conn)


async def test_idle_connection_reads_again_after_an_exchange_left_it_paused() -> None:
    conn = ServerConnection(_Handler(), Limits(), ConnectionTracker())
    transport = _FakeTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]  # a stand-in transport
    conn.data_received(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
    assert transport.written == [b"HTTP/1.1 204 No Content\r\n\r\n"]
    assert transport.reading


@given(st.lists(st.tuples(st.integers(0, 999), st.sampled_from([b"", b"OK", b"Fine"]))))
def test_remembered_status_lines_are_the_lines_asked_for(asks: list[tuple[int, bytes]]) -> None:
    """Whatever was asked before (the last line and the per-status memo answer repeats), a
    status line is the status and the reason asked for, or the standard one."""
    for status, reason in asks:
        standard = wire._REASONS.get(status, b"Unknown")
        assert status_line(status, reason) == b"HTTP/1.1 %d %s\r\n" % (
            status,
            reason or standard,
        )


def test_status_lines_follow_the_reason_asked_for_each_time() -> None:
    """Status lines are cached per status: a different reason for the same status, or none,
    still gets its own line (never the one made before)."""
    assert status_line(200, b"OK") == b"HTTP/1.1 200 OK\r\n"
    assert status_line(200, b"Fine") == b"HTTP/1.1 200 Fine\r\n"
    assert status_line(200) == b"HTTP/1.1 200 OK\r\n"  # the standard reason
    assert status_line(200, b"Fine") == b"HTTP/1.1 200 Fine\r\n"
    assert status_line(599) == b"HTTP/1.1 599 Unknown\r\n"
    head = response_head(404, b"Gone Fishing", [(b"x-a", b"1")], b"content-length: 0\r\n")
    assert head == b"HTTP/1.1 404 Gone Fishing\r\nx-a: 1\r\ncontent-length: 0\r\n\r\n"
    head = response_head(200, b"", [(b"x-a", b"1")], b"content-length: 0\r\n", b"via: 1.1 a\r\n")
    assert head == b"HTTP/1.1 200 OK\r\nx-a: 1\r\nvia: 1.1 a\r\ncontent-length: 0\r\n\r\n"


_TOKEN = st.binary(max_size=12)
_HEADERS = st.lists(st.tuples(_TOKEN, _TOKEN), max_size=6)


@given(_TOKEN, _TOKEN, _TOKEN, _HEADERS, _TOKEN)
def test_request_head_layout(
    method: bytes, target: bytes, host: bytes, headers: list[tuple[bytes, bytes]], framing: bytes
) -> None:
    """Each build's way of making a head (compiled, the constant stays as built: one way)."""
    expected = method + b" " + target + b" HTTP/1.1\r\nhost: " + host + b"\r\n"
    expected += b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    lines = b"via: 1.1 checkout\r\n"  # ready lines go after the headers, before the framing
    with_lines = expected + lines + framing + b"\r\n"
    expected += framing + b"\r\n"
    for compiled in (False, True):
        with mock.patch.object(wire, "COMPILED", compiled):
            assert request_head(method, target, host, headers, framing) == expected
            assert request_head(method, target, host, headers, framing, lines) == with_lines


@given(st.integers(100, 999), _TOKEN, _HEADERS, _TOKEN)
def test_response_head_layout(
    status: int, reason: bytes, headers: list[tuple[bytes, bytes]], framing: bytes
) -> None:
    expected = status_line(status, reason)
    expected += b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    expected += framing + b"\r\n"
    for compiled in (False, True):
        with mock.patch.object(wire, "COMPILED", compiled):
            assert response_head(status, reason, headers, framing) == expected


_CONNECTION_VALUES = st.sampled_from(
    [b"keep-alive", b"Keep-Alive", b"KEEP-ALIVE", b"close", b"Close", b"CLOSE", b"", b"upgrade"]
) | st.binary(max_size=12)


@given(_CONNECTION_VALUES)
def test_plain_connection_values_are_the_listed_spellings(value: bytes) -> None:
    """Compared by length and bytes, a Connection value is plain exactly when it is listed."""
    assert wire.plain_connection(value) == (value in wire.PLAIN_CONNECTION)


@given(st.lists(st.one_of(st.none(), st.integers(0, 3), st.integers(0, 10**12)), max_size=8))
def test_remembered_length_lines_are_the_length_asked_for(lengths: list[int | None]) -> None:
    """The content-length line of the last length is reused: each response still gets its
    own length, whatever came before."""
    for length in lengths:
        framing, chunked, _ = client_response_framing(200, False, length, False, True)
        if length is None:
            assert (framing, chunked) == (b"transfer-encoding: chunked\r\n", True)
        else:
            assert (framing, chunked) == (b"content-length: %d\r\n" % length, False)


def test_route_stats_count_every_outcome_in_order() -> None:
    stats = RouteStats()
    for outcome in ("success", "success", "timeout", "rejected", "success"):
        stats.count(outcome)
    stats.successes += 1  # as the pipeline counts a success, inlined
    stats.others["reset"] += 1  # and any other outcome
    assert list(stats.outcomes) == list(OUTCOMES)
    expected = dict.fromkeys(OUTCOMES, 0) | {"success": 4, "timeout": 1, "rejected": 1, "reset": 1}
    assert stats.outcomes == expected
    snapshot = stats.snapshot()
    stats.count("success")
    assert snapshot["success"] == 4 and stats.snapshot()["success"] == 5


@given(st.lists(st.floats(0, 20, allow_nan=False)))
def test_route_stats_histogram_counts_every_duration_in_its_bucket(durations: list[float]) -> None:
    """At any moment the histogram holds every call, in the bucket `bisect_left` names."""
    stats = RouteStats()
    expected = [0] * (len(LATENCY_BOUNDS) + 1)
    for seconds in durations:
        stats.observe(seconds)
        expected[bisect.bisect_left(LATENCY_BOUNDS, seconds)] += 1
        assert stats.latency_buckets == expected
    assert stats.latency_count == len(durations)
    assert stats.latency_sum == pytest.approx(sum(durations))
