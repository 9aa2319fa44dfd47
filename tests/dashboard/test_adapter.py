"""The adapter reads today's sidecar spellings and the unified ones alike; bad input is named."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cascadebreaker.dashboard.adapter import (
    Unreadable,
    counts_of,
    state_name,
    status_from_json,
    update_from_json,
    update_from_proto,
    update_from_redis,
)
from cascadebreaker.dashboard.model import Counts, Link, Unavailability
from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2 as pb

# A /status document as a sidecar writes it today (shortened from a real one).
TODAY: dict[str, Any] = {
    "service": "shipping",
    "breakers": {
        "courier": {
            "name": "courier",
            "state": "open",
            "retry_after": 2.5,
            "retryAfter": 2.5,
            "calls": {"success": 5, "failure_status": 3, "timeout": 1, "rejected": 4},
        }
    },
    "cascade": {
        "advertise": "127.0.0.1:40429",
        "unavailable": [
            {
                "endpoint": "shipping POST /v1/shipments",
                "cause_chain": [
                    {"endpoint": "courier * *", "reason": "circuit open"},
                    {
                        "endpoint": "shipping POST /v1/shipments",
                        "reason": "requires courier POST /v1/shipments",
                    },
                ],
                "expires_in": 2.9,
                "expires_at": 1700000003.0,
            }
        ],
        "edges": [
            {
                "caller": "shipping POST /v1/shipments",
                "callee": "courier POST /v1/shipments",
                "required": True,
            }
        ],
    },
}

# The same facts in the unified vocabulary (issue 9): upper-case states, camelCase, a list.
UNIFIED: dict[str, Any] = {
    "service": "shipping",
    "breakers": [
        {
            "upstream": "courier",
            "state": "OPEN",
            "retryAfter": 2.5,
            "calls": {"success": 5, "failure_status": 3, "timeout": 1, "rejected": 4},
        }
    ],
    "cascade": {
        "advertise": "127.0.0.1:40429",
        "unavailable": [
            {
                "endpoint": "shipping POST /v1/shipments",
                "causeChain": [
                    {"endpoint": "courier * *", "reason": "circuit_open"},
                    {
                        "endpoint": "shipping POST /v1/shipments",
                        "reason": "requires courier POST /v1/shipments",
                    },
                ],
                "expiresAt": 1700000003.0,
            }
        ],
        "edges": [
            {
                "caller": "shipping POST /v1/shipments",
                "callee": "courier POST /v1/shipments",
                "required": True,
            }
        ],
    },
}


@pytest.mark.parametrize("doc", [TODAY, UNIFIED], ids=["today", "unified"])
def test_status_reads_both_spellings_alike(doc: dict[str, Any]) -> None:
    status = status_from_json(doc)

    assert status.service == "shipping"
    (breaker,) = status.breakers
    assert (breaker.upstream, breaker.state, breaker.retry_after) == ("courier", "OPEN", 2.5)
    assert breaker.counts == Counts(calls=9, failures=4, rejected=4)
    unavailable = status.unavailable["shipping POST /v1/shipments"]
    assert unavailable.expires_at == 1700000003.0
    assert [link.endpoint for link in unavailable.chain] == [
        "courier * *",
        "shipping POST /v1/shipments",
    ]
    assert unavailable.chain[0].breaker_open
    assert [(e.caller, e.callee, e.required) for e in status.edges] == [
        ("shipping POST /v1/shipments", "courier POST /v1/shipments", True)
    ]
    assert status.watch_address == "127.0.0.1:40429"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("closed", "CLOSED"),
        ("OPEN", "OPEN"),
        ("half_open", "HALF_OPEN"),
        ("half-open", "HALF_OPEN"),
        ("HalfOpen", "HALF_OPEN"),
        ("CIRCUIT_STATE_OPEN", "OPEN"),
        (3, "HALF_OPEN"),
    ],
)
def test_state_names(raw: object, expected: str) -> None:
    assert state_name(raw) == expected


@pytest.mark.parametrize("raw", ["melted", "", None, 0, 7, True])
def test_unknown_states_are_unreadable(raw: object) -> None:
    with pytest.raises(Unreadable, match="unknown breaker state"):
        state_name(raw)


def test_counts_ignore_cancelled_and_non_numbers() -> None:
    outcomes = {"success": 3, "connect": 2, "cancelled": 5, "rejected": 1, "note": "x"}

    assert counts_of(outcomes) == Counts(calls=5, failures=2, rejected=1)
    assert counts_of(None) == Counts()


def test_a_status_without_cascade_or_breakers_is_a_bare_sidecar() -> None:
    status = status_from_json({"service": "inventory", "breakers": {}})

    assert (status.breakers, status.edges, status.unavailable) == ((), (), {})
    assert status.watch_address is None


@pytest.mark.parametrize("address", ["0.0.0.0:15002", "[::]:15002", ""])
def test_an_address_no_one_can_dial_is_no_watch_address(address: str) -> None:
    doc = {"service": "a", "cascade": {"advertise": address}}

    assert status_from_json(doc).watch_address is None


ENDPOINT = "a GET /"


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "must be a JSON object"),
        ({"breakers": {}}, "no service name"),
        ({"service": "a", "breakers": "x"}, "breakers must be"),
        ({"service": "a", "breakers": {"b": {"state": "??"}}}, "unknown breaker state"),
        ({"service": "a", "breakers": {"b": 1}}, "breaker 'b' must be an object"),
        ({"service": "a", "cascade": {"edges": {}}}, "edges must be a list"),
        ({"service": "a", "cascade": {"edges": [{"caller": "x", "callee": "a GET /"}]}}, "got 'x'"),
        ({"service": "a", "cascade": {"unavailable": [{"endpoint": 5}]}}, "endpoint must be"),
        (
            {"service": "a", "cascade": {"unavailable": [{"endpoint": ENDPOINT, "causeChain": 1}]}},
            "cause chain must be a list",
        ),
        (
            {"service": "a", "breakers": {"b": {"state": "open", "retryAfter": "soon"}}},
            "/status:",
        ),
    ],
)
def test_unreadable_status_names_what_is_wrong(doc: object, message: str) -> None:
    with pytest.raises(Unreadable, match=message):
        status_from_json(doc)


def test_update_json_in_both_spellings() -> None:
    today = {
        "service": "order",
        "endpoint": "order POST /v1/orders",
        "available": False,
        "cause_chain": [
            {"endpoint": "shipping * *", "reason": "circuit open"},
            {"endpoint": "order POST /v1/orders", "reason": "requires shipping POST /v1/x"},
        ],
        "expires_at": 1700000001.5,
        "version": 7,
        "signature": "ab",
    }
    unified = {**today, "causeChain": today["cause_chain"], "expiresAt": 1700000001.5}
    del unified["cause_chain"], unified["expires_at"]

    a, b = update_from_json(today, "redis"), update_from_json(unified, "redis")

    assert a == b
    assert (a.service, a.endpoint, a.available, a.version) == (
        "order",
        "order POST /v1/orders",
        False,
        7,
    )
    assert a.chain[0] == Link("shipping * *", "circuit open")


def test_redis_message_is_sender_bar_json() -> None:
    body = {"service": "pay", "endpoint": "pay GET /x", "available": True, "version": 2}
    update = update_from_redis(b"123-abc|" + json.dumps(body).encode())

    assert (update.endpoint, update.available, update.via) == ("pay GET /x", True, "redis")


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (b"no separator", "'<sender>|<json>'"),
        (b"x|{not json", "not JSON"),
        (b"x|[]", "JSON object"),
        (b'x|{"endpoint": "a GET /"}', "name its service"),
        (b'x|{"service": "a", "endpoint": "GET"}', "endpoint must be"),
        (b'x|{"service": "a", "endpoint": "a GET /", "version": "v"}', "update:"),
    ],
)
def test_unreadable_redis_messages(message: bytes, error: str) -> None:
    with pytest.raises(Unreadable, match=error):
        update_from_redis(message)


def test_watch_message_from_the_proto_contract() -> None:
    message = pb.AvailabilityUpdate(
        service="shipping",
        endpoint="POST /v1/shipments",
        available=False,
        cause_chain=[
            pb.Cause(service="courier", endpoint="* *", reason="circuit open"),
            pb.Cause(service="shipping", endpoint="POST /v1/shipments", reason="requires ..."),
        ],
        expires_at_unix_ms=1700000002500,
        version=12,
    )

    update = update_from_proto(message)

    assert update.endpoint == "shipping POST /v1/shipments"
    assert update.chain[0] == Link("courier * *", "circuit open")
    assert (update.expires_at, update.version, update.via) == (1700000002.5, 12, "watch")
    assert Unavailability(update.chain, update.expires_at).chain[1].service == "shipping"


def test_watch_message_without_a_service_is_unreadable() -> None:
    with pytest.raises(Unreadable, match="name its service"):
        update_from_proto(pb.AvailabilityUpdate(endpoint="GET /"))


def test_edges_carry_their_optionality_and_evidence() -> None:
    doc = json.loads(json.dumps(TODAY))
    doc["cascade"]["edges"] = [
        {
            "caller": "report GET /reports/settlements",
            "callee": "settlement GET /v1/settlements",
            "required": False,
            "optionality": "optional (learned)",
            "evidence": {"survived": 4.0, "failedWith": 0.5},
        },
        {"caller": "a GET /x", "callee": "b GET /y", "required": False},  # an older sidecar
        {"caller": "a GET /x", "callee": "c GET /z", "evidence": {"survived": "many"}},
    ]
    learned, marked, plain = status_from_json(doc).edges
    assert (learned.optionality, learned.survived, learned.failed_with) == (
        "optional (learned)",
        4.0,
        0.5,
    )
    assert (marked.optionality, marked.survived) == ("optional (marked)", 0.0)
    assert (plain.optionality, plain.required, plain.survived) == ("required", True, 0.0)
