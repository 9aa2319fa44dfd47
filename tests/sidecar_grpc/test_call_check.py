"""ccb.v1.Sidecar Call and Check through a real grpcio client, sidecar runtime and upstream."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import grpc
import pytest
from google.rpc import code_pb2, error_details_pb2
from grpc_status import rpc_status

from cascadebreaker import State
from cascadebreaker.sidecar.config import HostPort
from cascadebreaker.sidecar.grpc.api import start_grpc_server
from cascadebreaker.sidecar.grpc.messages import (
    FOREVER_MS,
    REJECTION_METADATA,
    UPSTREAM_ERROR_METADATA,
)
from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2 as pb
from cascadebreaker.sidecar.proxy.hooks import Rejection, RequestInfo

from .conftest import GrpcSidecar

OPEN = pb.CIRCUIT_STATE_OPEN


def _trailer(error: grpc.aio.AioRpcError, key: str) -> Any:
    """The value of one trailing metadata key of a failed call (None when absent)."""
    for name, value in error.trailing_metadata() or ():
        if name == key:
            return value
    return None


def _echo(response: Any) -> dict[str, Any]:
    return json.loads(response.body)  # type: ignore[no-any-return]


async def test_call_returns_the_upstream_response(grpc_sidecar: GrpcSidecar) -> None:
    """Status, body and headers (duplicates, order) travel both ways."""
    response = await grpc_sidecar.stub.Call(
        pb.CallRequest(
            upstream="payment",
            method="POST",
            path="/v1/charges?currency=eur",
            headers=[pb.Header(name="X-Tag", value="a"), pb.Header(name="x-tag", value="b")],
            body=b'{"amount": 42}',
        ),
        timeout=10,
    )
    assert response.status == 200
    echo = _echo(response)
    assert echo["method"] == "POST"
    assert echo["path"] == "/v1/charges?currency=eur"
    assert echo["body"] == '{"amount": 42}'
    assert [v for n, v in echo["headers"] if n == "x-tag"] == ["a", "b"]
    assert [(h.name, h.value) for h in response.headers if h.name == "x-upstream"] == [
        ("x-upstream", "one"),
        ("x-upstream", "two"),
    ]
    assert grpc_sidecar.runtime.routes["payment"].stats.outcomes["success"] == 1


async def test_method_defaults_to_get(grpc_sidecar: GrpcSidecar) -> None:
    """An empty method is GET."""
    response = await grpc_sidecar.stub.Call(pb.CallRequest(upstream="payment", path="/"))
    assert _echo(response)["method"] == "GET"


async def test_5xx_is_a_response_and_recorded_as_failure(grpc_sidecar: GrpcSidecar) -> None:
    """An upstream 503 is not a gRPC error, but the breaker counts it."""
    response = await grpc_sidecar.stub.Call(
        pb.CallRequest(upstream="payment", path="/status/503"), timeout=10
    )
    assert response.status == 503
    route = grpc_sidecar.runtime.routes["payment"]
    assert route.stats.outcomes["failure_status"] == 1
    assert route.breaker is not None
    assert route.breaker.state is State.CLOSED  # threshold is 2


async def test_4xx_is_not_a_failure(grpc_sidecar: GrpcSidecar) -> None:
    """4xx answers are the caller's problem, not the upstream's."""
    for _ in range(3):
        response = await grpc_sidecar.stub.Call(
            pb.CallRequest(upstream="payment", path="/status/404")
        )
        assert response.status == 404
    check = await grpc_sidecar.stub.Check(pb.CheckRequest(upstream="payment"))
    assert check.available
    assert check.circuit_state == pb.CIRCUIT_STATE_CLOSED


async def test_breaker_trips_to_unavailable_with_rejection(grpc_sidecar: GrpcSidecar) -> None:
    """After the threshold, calls are refused with the Rejection in trailing metadata."""
    stub = grpc_sidecar.stub
    for _ in range(2):
        await stub.Call(pb.CallRequest(upstream="payment", path="/status/500"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Call(pb.CallRequest(upstream="payment", path="/"))
    error = caught.value
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert "circuit open" in (error.details() or "")
    rejection = pb.Rejection.FromString(_trailer(error, REJECTION_METADATA))
    assert rejection.upstream == "payment"
    assert rejection.circuit_state == OPEN
    assert rejection.reason == "circuit_open"
    assert 0 < rejection.retry_after_ms <= 30_000
    assert _trailer(error, UPSTREAM_ERROR_METADATA) is None
    assert grpc_sidecar.runtime.routes["payment"].stats.outcomes["rejected"] == 1

    check = await stub.Check(pb.CheckRequest(upstream="payment"))
    assert not check.available
    assert check.circuit_state == OPEN
    assert 0 < check.retry_after_ms <= 30_000
    endpoint_check = await stub.Check(pb.CheckRequest(upstream="payment", endpoint="GET /x/7"))
    assert not endpoint_check.available


async def test_check_reflects_a_fresh_breaker(grpc_sidecar: GrpcSidecar) -> None:
    """Nothing failed yet: available, closed, nothing to wait for."""
    check = await grpc_sidecar.stub.Check(pb.CheckRequest(upstream="payment"))
    assert check.available
    assert check.circuit_state == pb.CIRCUIT_STATE_CLOSED
    assert check.retry_after_ms == 0
    assert list(check.cause_chain) == []


async def test_check_after_reset_is_available_again(grpc_sidecar: GrpcSidecar) -> None:
    """Check reads the live breaker, not a cached answer."""
    breaker = grpc_sidecar.runtime.routes["payment"].breaker
    assert breaker is not None
    breaker.force_open()
    forced = await grpc_sidecar.stub.Check(pb.CheckRequest(upstream="payment"))
    assert not forced.available
    assert forced.retry_after_ms == FOREVER_MS  # only an operator's reset closes it
    breaker.reset()
    check = await grpc_sidecar.stub.Check(pb.CheckRequest(upstream="payment"))
    assert check.available


async def test_unknown_upstream_is_not_found(grpc_sidecar: GrpcSidecar) -> None:
    """Call and Check both name the missing upstream."""
    for call in (
        grpc_sidecar.stub.Call(pb.CallRequest(upstream="nope", path="/")),
        grpc_sidecar.stub.Check(pb.CheckRequest(upstream="nope")),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
        assert "nope" in (caught.value.details() or "")


async def test_upstream_timeout_is_deadline_exceeded(grpc_sidecar: GrpcSidecar) -> None:
    """The per-call timeout bounds the wait; the timeout is a recorded failure."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await grpc_sidecar.stub.Call(
            pb.CallRequest(upstream="payment", path="/?delay=3", timeout_ms=200), timeout=20
        )
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert _trailer(caught.value, UPSTREAM_ERROR_METADATA) == "timeout"
    route = grpc_sidecar.runtime.routes["payment"]
    assert route.stats.outcomes["timeout"] == 1
    assert route.breaker is not None
    assert route.breaker.snapshot() != {}


async def test_connection_refused_is_unavailable_without_rejection(
    grpc_sidecar: GrpcSidecar,
) -> None:
    """A dead upstream: UNAVAILABLE naming the error kind, no Rejection (the call was made)."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await grpc_sidecar.stub.Call(pb.CallRequest(upstream="refused", path="/"), timeout=20)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert _trailer(caught.value, UPSTREAM_ERROR_METADATA) == "connect"
    assert _trailer(caught.value, REJECTION_METADATA) is None
    assert grpc_sidecar.runtime.routes["refused"].stats.outcomes["connect"] == 1


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"upstream": "", "path": "/"}, "upstream"),
        ({"upstream": "payment", "path": "relative"}, "path"),
        ({"upstream": "payment", "path": "/a b"}, "path"),
        ({"upstream": "payment", "path": "/", "method": "GE T"}, "method"),
        (
            {"upstream": "payment", "path": "/", "headers": [{"name": "bad name", "value": "x"}]},
            "headers",
        ),
        (
            {"upstream": "payment", "path": "/", "headers": [{"name": "x", "value": "a\r\nb: c"}]},
            "headers",
        ),
        ({"upstream": "payment", "path": "/", "serving_endpoint": "no-route"}, "serving_endpoint"),
        # Regression: it passed validation, then failed encoding into the header (UNKNOWN).
        (
            {"upstream": "payment", "path": "/", "serving_endpoint": "POST /v1/\u20ac"},
            "serving_endpoint",
        ),
    ],
)
async def test_malformed_call_is_invalid_argument(
    grpc_sidecar: GrpcSidecar, request_fields: dict[str, Any], field: str
) -> None:
    """Each malformed field is refused before any upstream is touched, and named."""
    headers = [pb.Header(**h) for h in request_fields.pop("headers", [])]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await grpc_sidecar.stub.Call(pb.CallRequest(headers=headers, **request_fields))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (caught.value.details() or "").startswith(field)
    assert sum(grpc_sidecar.runtime.routes["payment"].stats.outcomes.values()) == 0


@pytest.mark.parametrize(
    "data",
    [
        b"\x0a\x07payment\x1a\x02/\xff",  # a path that is not UTF-8
        b"\x0a\x07payment\x1a\x09/",  # cut short
        b"\xff\xff\xff",  # not protobuf at all
    ],
)
async def test_bytes_that_are_no_call_request_are_invalid_argument(
    grpc_sidecar: GrpcSidecar, data: bytes
) -> None:
    """`Call` reads its request's bytes itself: what is no `CallRequest` is refused as
    INVALID_ARGUMENT naming `request`, nothing is called, and the next call is served."""
    call = grpc_sidecar.channel.unary_unary(
        "/ccb.v1.Sidecar/Call", request_serializer=None, response_deserializer=None
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(data, timeout=20)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (caught.value.details() or "").startswith("request: not a ccb.v1.CallRequest")
    assert sum(grpc_sidecar.runtime.routes["payment"].stats.outcomes.values()) == 0
    reply = await grpc_sidecar.stub.Call(pb.CallRequest(upstream="payment", path="/"), timeout=20)
    assert reply.status == 200


async def test_malformed_check_endpoint_is_invalid_argument(grpc_sidecar: GrpcSidecar) -> None:
    """Check's endpoint must be `METHOD /route`."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await grpc_sidecar.stub.Check(pb.CheckRequest(upstream="payment", endpoint="/x"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


class _RefusingHook:
    """A stand-in for the cascade: refuses calls to one route, remembers what it saw."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []

    def on_request(self, info: RequestInfo) -> Rejection | None:
        self.seen.append((info.endpoint, info.header("ccb-serving-endpoint")))
        if info.path.startswith("/doomed"):
            chain = [
                {"endpoint": "ledger POST /v1/entries", "reason": "circuit open"},
                {"endpoint": "payment POST /doomed", "reason": "requires ledger"},
            ]
            return Rejection(
                {
                    "error": "endpoint unavailable",
                    "upstream": info.target,
                    "circuitState": "closed",
                    "causeChain": chain,
                },
                retry_after=4.2,
            )
        return None

    def on_response(self, info: RequestInfo, status: int, outcome: str) -> None:
        pass


async def test_cascade_refusal_carries_the_cause_chain(grpc_sidecar: GrpcSidecar) -> None:
    """A hook's rejection becomes UNAVAILABLE with the cause chain, root first."""
    hook = _RefusingHook()
    grpc_sidecar.runtime.hooks.add(hook)
    ok = await grpc_sidecar.stub.Call(
        pb.CallRequest(upstream="payment", path="/v1/ok/12", serving_endpoint="POST /v1/orders")
    )
    assert ok.status == 200
    assert hook.seen == [("GET /v1/ok/{id}", "checkout POST /v1/orders")]  # as the header says
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await grpc_sidecar.stub.Call(
            pb.CallRequest(upstream="payment", method="POST", path="/doomed")
        )
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    rejection = pb.Rejection.FromString(_trailer(caught.value, REJECTION_METADATA))
    assert rejection.reason == "cascade"
    assert rejection.circuit_state == pb.CIRCUIT_STATE_CLOSED
    assert rejection.retry_after_ms == 4200
    assert [(c.service, c.endpoint, c.reason) for c in rejection.cause_chain] == [
        ("ledger", "POST /v1/entries", "circuit open"),
        ("payment", "POST /doomed", "requires ledger"),
    ]


async def test_a_taken_port_is_an_error_naming_the_listener(grpc_sidecar: GrpcSidecar) -> None:
    """gRPC would share a port silently (SO_REUSEPORT); the sidecar refuses to start instead."""
    config = grpc_sidecar.runtime.config
    taken = replace(
        config,
        listen=replace(
            config.listen, grpc=HostPort(host="127.0.0.1", port=grpc_sidecar.server.port)
        ),
    )
    with pytest.raises(OSError, match=r"listen\.grpc"):
        await start_grpc_server(taken, grpc_sidecar.runtime)


async def test_a_disabled_listener_starts_nothing(grpc_sidecar: GrpcSidecar) -> None:
    """`listen.grpc: null` means no gRPC server."""
    config = grpc_sidecar.runtime.config
    off = replace(config, listen=replace(config.listen, grpc=None))
    assert await start_grpc_server(off, grpc_sidecar.runtime) is None


async def test_serving_endpoint_teaches_the_edge_like_the_header(
    grpc_sidecar: GrpcSidecar,
) -> None:
    """Regression (issue 9): `CallRequest.serving_endpoint` was accepted and taught nothing."""
    runtime = grpc_sidecar.runtime
    ok = await grpc_sidecar.stub.Call(
        pb.CallRequest(upstream="payment", path="/v1/ok/12", serving_endpoint="POST /v1/orders")
    )
    assert ok.status == 200
    edges = runtime.status()["cascade"]["edges"]
    assert {"caller": "checkout POST /v1/orders", "callee": "payment GET /v1/ok/{id}"} in [
        {"caller": e["caller"], "callee": e["callee"]} for e in edges
    ]


async def test_a_refusal_is_a_rich_error_with_the_chain_check_reports(
    grpc_sidecar: GrpcSidecar,
) -> None:
    """An open breaker's refusal: google.rpc.Status (ErrorInfo + RetryInfo) in
    grpc-status-details-bin, and the same cause chain as Check at that moment."""
    stub = grpc_sidecar.stub
    for _ in range(2):
        await stub.Call(pb.CallRequest(upstream="payment", path="/status/500"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Call(pb.CallRequest(upstream="payment", path="/"))
    check = await stub.Check(pb.CheckRequest(upstream="payment"))
    status = rpc_status.from_call(caught.value)
    assert status is not None and status.code == code_pb2.UNAVAILABLE
    info, retry = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
    kinds = [d.TypeName() for d in status.details]
    assert kinds == ["google.rpc.ErrorInfo", "google.rpc.RetryInfo"]
    status.details[0].Unpack(info)
    status.details[1].Unpack(retry)
    assert (info.reason, info.domain) == ("CIRCUIT_OPEN", "cascadebreaker")
    meta = dict(info.metadata)
    assert (meta["upstream"], meta["circuitState"], meta["reasonCode"]) == (
        "payment",
        "OPEN",
        "circuit_open",
    )
    assert 0 < float(meta["retryAfter"]) <= 30
    assert json.loads(meta["causeChain"]) == [{"endpoint": "payment * *", "reason": "circuit_open"}]
    assert 0 < retry.retry_delay.ToMilliseconds() <= 30_000
    rejection = pb.Rejection.FromString(_trailer(caught.value, REJECTION_METADATA))
    chain = [(c.service, c.endpoint, c.reason) for c in rejection.cause_chain]
    assert chain == [("payment", "* *", "circuit_open")]
    assert chain == [(c.service, c.endpoint, c.reason) for c in check.cause_chain]
