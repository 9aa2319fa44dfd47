"""Trace-context extraction and the bounded trace table."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cascadebreaker.cascade import (
    Endpoint,
    TraceTable,
    parse_b3,
    parse_traceparent,
    trace_context,
    trace_key,
)

from .helpers import FakeClock

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
SERVING = Endpoint("checkout", "POST", "/v1/orders")


def test_traceparent_yields_trace_and_parent_span() -> None:
    ctx = parse_traceparent(f"00-{TRACE}-{SPAN}-01")
    assert ctx is not None
    assert (ctx.trace_id, ctx.span_id, ctx.key) == (TRACE, SPAN, TRACE)


def test_traceparent_is_case_insensitive() -> None:
    ctx = parse_traceparent(f"00-{TRACE.upper()}-{SPAN}-01")
    assert ctx is not None
    assert ctx.key == TRACE


@pytest.mark.parametrize(
    "value",
    [
        "",
        "garbage",
        f"00-{TRACE}-{SPAN}",
        f"00-{'0' * 32}-{SPAN}-01",  # all-zero trace id is invalid
        f"00-{TRACE}-{'0' * 16}-01",
        f"ff-{TRACE}-{SPAN}-01",  # version ff is forbidden
        f"00-{TRACE[:-1]}-{SPAN}-01",
        f"00-{TRACE}-{SPAN}-01-extra",  # version 00 has exactly four fields
        f"00-{TRACE[:-1]}x-{SPAN}-01",
    ],
)
def test_traceparent_rejects_invalid(value: str) -> None:
    assert parse_traceparent(value) is None


def test_future_traceparent_version_may_carry_more_fields() -> None:
    ctx = parse_traceparent(f"01-{TRACE}-{SPAN}-01-future")
    assert ctx is not None
    assert ctx.key == TRACE


def test_b3_single_header() -> None:
    ctx = parse_b3(f"{TRACE}-{SPAN}-1-{'1' * 16}")
    assert ctx is not None
    assert (ctx.key, ctx.span_id) == (TRACE, SPAN)


def test_b3_64_bit_trace_id_is_left_padded() -> None:
    ctx = parse_b3(f"{TRACE[16:]}-{SPAN}")
    assert ctx is not None
    assert ctx.key == "0" * 16 + TRACE[16:]


@pytest.mark.parametrize("value", ["0", "1", "d", f"{TRACE}-short", f"{'0' * 32}-{SPAN}"])
def test_b3_without_ids_gives_nothing(value: str) -> None:
    assert parse_b3(value) is None


def test_multi_b3_headers() -> None:
    headers = {"x-b3-traceid": TRACE[16:], "x-b3-spanid": SPAN}
    ctx = trace_context(headers.get)
    assert ctx is not None
    assert (ctx.key, ctx.span_id) == ("0" * 16 + TRACE[16:], SPAN)


def test_request_id_is_the_last_resort() -> None:
    assert trace_key({"x-request-id": "  req-42 "}) == "rid:req-42"
    assert trace_key({"x-request-id": "x" * 201}) is None
    assert trace_key({}) is None


def test_priority_traceparent_then_b3_then_request_id() -> None:
    other = "a" * 32
    headers = {
        "traceparent": f"00-{TRACE}-{SPAN}-01",
        "b3": f"{other}-{SPAN}",
        "x-request-id": "r1",
    }
    assert trace_key(headers) == TRACE
    headers["traceparent"] = "broken"
    assert trace_key(headers) == other
    del headers["b3"]
    assert trace_key(headers) == "rid:r1"


def test_w3c_and_b3_of_one_trace_share_a_key() -> None:
    assert trace_key({"traceparent": f"00-{TRACE}-{SPAN}-01"}) == trace_key(
        {"b3": f"{TRACE}-{'1' * 16}-1"}
    )


def test_outbound_call_with_new_span_is_attributed_to_the_inbound_endpoint(
    clock: FakeClock,
) -> None:
    table = TraceTable(clock)
    inbound = trace_key({"traceparent": f"00-{TRACE}-{SPAN}-01"})
    assert inbound is not None
    table.begin(inbound, SERVING)
    outbound = trace_key({"traceparent": f"00-{TRACE}-{'b' * 16}-01"})
    assert outbound is not None
    assert table.serving(outbound) == SERVING


def test_entries_expire(clock: FakeClock) -> None:
    table = TraceTable(clock, ttl=5.0)
    table.begin("k", SERVING)
    clock.advance(4.9)
    assert table.serving("k") == SERVING
    clock.advance(0.2)
    assert table.serving("k") is None
    assert len(table) == 0


def test_capacity_evicts_least_recently_begun(clock: FakeClock) -> None:
    table = TraceTable(clock, capacity=2)
    table.begin("a", SERVING)
    table.begin("b", SERVING)
    table.begin("a", SERVING)  # refreshes a
    table.begin("c", SERVING)
    assert table.serving("b") is None
    assert table.serving("a") == SERVING
    assert table.serving("c") == SERVING


def test_overlapping_requests_for_different_endpoints_are_ambiguous(clock: FakeClock) -> None:
    table = TraceTable(clock)
    other = Endpoint("checkout", "GET", "/v1/orders/{id}")
    table.begin("k", SERVING)
    table.begin("k", other)
    assert table.serving("k") is None


def test_sequential_requests_in_one_trace_are_not_ambiguous(clock: FakeClock) -> None:
    table = TraceTable(clock)
    other = Endpoint("checkout", "GET", "/v1/orders/{id}")
    table.begin("k", SERVING)
    table.end("k")
    table.begin("k", other)
    assert table.serving("k") == other


def test_same_endpoint_twice_stays_attributed(clock: FakeClock) -> None:
    table = TraceTable(clock)
    table.begin("k", SERVING)
    table.begin("k", SERVING)
    table.end("k")
    assert table.serving("k") == SERVING


def test_expired_entries_are_dropped_on_insert(clock: FakeClock) -> None:
    table = TraceTable(clock, ttl=1.0)
    for i in range(5):
        table.begin(f"k{i}", SERVING)
    clock.advance(2.0)
    table.begin("fresh", SERVING)
    assert len(table) == 1


def test_bad_parameters_are_refused(clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="ttl"):
        TraceTable(clock, ttl=0)
    with pytest.raises(ValueError, match="capacity"):
        TraceTable(clock, capacity=0)


@given(st.lists(st.tuples(st.sampled_from("abcdefgh"), st.booleans(), st.floats(0, 3))))
def test_table_never_exceeds_capacity(ops: list[tuple[str, bool, float]]) -> None:
    clock = FakeClock()
    table = TraceTable(clock, ttl=5.0, capacity=3)
    for key, finish, dt in ops:
        clock.advance(dt)
        if finish:
            table.end(key)
        else:
            table.begin(key, SERVING)
        assert len(table) <= 3
