"""HTTP and gRPC calls go through one pipeline: the same scenario gives the same answer, the
same stats and the same hook outcomes through the outbound listener and through `Call`.

Each test runs once per driver against a fresh sidecar (outbound and gRPC listeners in this
event loop) and asserts one expectation for both.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import httpx
import pytest

from cascadebreaker.sidecar.grpc.messages import REJECTION_METADATA, UPSTREAM_ERROR_METADATA
from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2 as pb
from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2_grpc
from cascadebreaker.sidecar.proxy.hooks import Rejection, RequestInfo
from cascadebreaker.sidecar.proxy.stats import RouteStats
from cascadebreaker.sidecar.schema import parse_config
from cascadebreaker.sidecar.server import SidecarServer

from .conftest import HITS, free_port

_UPSTREAM_ERROR_STATUS = {"timeout": 504, "connect": 502, "reset": 502, "protocol": 502}


@dataclass
class OutcomeHook:
    """Records what the hooks hear: (target, status, outcome) per answered call."""

    heard: list[tuple[str, int, str]] = field(default_factory=list)

    def on_request(self, info: RequestInfo) -> Rejection | None:
        return None

    def on_response(self, info: RequestInfo, status: int, outcome: str) -> None:
        self.heard.append((info.target, status, outcome))


@dataclass
class Sidecar:
    server: SidecarServer
    hook: OutcomeHook
    send: Callable[[str, str, str], Awaitable[int]]

    def stats(self, upstream: str) -> RouteStats:
        assert self.server.runtime is not None
        return self.server.runtime.routes[upstream].stats


def _config(upstream_url: str) -> Any:
    no_refill = {"ratio": 0, "min_per_second": 0}  # one retry token, never refilled
    return parse_config(
        {
            "service": "checkout",
            "listen": {
                "outbound": "127.0.0.1:0",
                "inbound": None,
                "admin": None,
                "grpc": f"127.0.0.1:{free_port()}",
            },
            "upstreams": {
                "retrying": {
                    "url": upstream_url,
                    "retries": {"attempts": 1, "on_statuses": [503], "budget": no_refill},
                },
                "payment": {
                    "url": upstream_url,
                    "breaker": {"failure_threshold": 2, "recovery_timeout": 30},
                },
                "refused": {"url": f"http://127.0.0.1:{free_port()}", "timeout": 2.0},
            },
            "cascade": {"enabled": False},
        }
    )


async def _via_http(server: SidecarServer, upstream: str, method: str, path: str) -> int:
    url = f"http://{server.address('outbound')}/{upstream}{path}"
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.request(method, url)
    return response.status_code


def _grpc_sender(stub: Any) -> Callable[[str, str, str], Awaitable[int]]:
    async def send(upstream: str, method: str, path: str) -> int:
        """The HTTP status the same outcome has on the HTTP path."""
        request = pb.CallRequest(upstream=upstream, method=method, path=path)
        try:
            response = await stub.Call(request, timeout=10)
        except grpc.aio.AioRpcError as error:
            trailers = dict(error.trailing_metadata() or ())
            if REJECTION_METADATA in trailers:
                return 503
            return _UPSTREAM_ERROR_STATUS[trailers[UPSTREAM_ERROR_METADATA]]
        return int(response.status)

    return send


@pytest.fixture(params=["http", "grpc"])
async def sidecar(request: pytest.FixtureRequest, upstream_server: str) -> AsyncIterator[Sidecar]:
    server = SidecarServer(_config(upstream_server))
    await server.start()
    assert server.runtime is not None
    hook = OutcomeHook()
    server.runtime.hooks.add(hook)
    channel = grpc.aio.insecure_channel(str(server.config.listen.grpc))
    stub = sidecar_pb2_grpc.SidecarStub(channel)
    if request.param == "http":

        async def send(upstream: str, method: str, path: str) -> int:
            return await _via_http(server, upstream, method, path)

    else:
        send = _grpc_sender(stub)
    try:
        yield Sidecar(server, hook, send)
    finally:
        await channel.close()
        await server.stop()


def _key() -> str:
    return uuid.uuid4().hex


async def test_an_idempotent_call_is_retried_a_post_is_not(sidecar: Sidecar) -> None:
    get, post = _key(), _key()
    assert await sidecar.send("retrying", "GET", f"/fail-first/1/{get}") == 200
    assert HITS[get] == 2
    assert await sidecar.send("retrying", "POST", f"/fail-first/1/{post}") == 503
    assert HITS[post] == 1  # a retried POST could act twice
    outcomes = sidecar.stats("retrying").outcomes
    assert (outcomes["success"], outcomes["failure_status"]) == (1, 2)
    assert sidecar.hook.heard == [("retrying", 200, "success"), ("retrying", 503, "failure")]


async def test_the_retry_budget_caps_retries(sidecar: Sidecar) -> None:
    first, second = _key(), _key()
    assert await sidecar.send("retrying", "GET", f"/fail-first/9/{first}") == 503
    assert HITS[first] == 2  # the one token of the budget
    assert await sidecar.send("retrying", "GET", f"/fail-first/9/{second}") == 503
    assert HITS[second] == 1  # the budget is spent: no retry
    assert sidecar.stats("retrying").outcomes["failure_status"] == 3


async def test_a_failed_call_is_in_the_latency_histogram(sidecar: Sidecar) -> None:
    assert await sidecar.send("refused", "GET", "/x") == 502
    stats = sidecar.stats("refused")
    assert stats.outcomes["connect"] == 1
    assert stats.latency_count == 1
    assert sidecar.hook.heard == [("refused", 502, "failure")]


async def test_an_open_circuit_rejects_alike(sidecar: Sidecar) -> None:
    for _ in range(2):
        assert await sidecar.send("payment", "GET", "/status/500") == 500
    assert await sidecar.send("payment", "GET", "/status/200") == 503
    stats = sidecar.stats("payment")
    assert (stats.outcomes["failure_status"], stats.outcomes["rejected"]) == (2, 1)
    assert stats.latency_count == 2  # a rejection never reached the upstream
    assert sidecar.hook.heard[-1] == ("payment", 503, "rejected")
