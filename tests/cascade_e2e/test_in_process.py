"""The sidecar's cascade pieces in one process: config errors, /availability input, the hub."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cascadebreaker.cascade import (
    AvailabilityUpdate,
    Cause,
    Endpoint,
    Verdict,
    hop_material,
    sign,
)
from cascadebreaker.sidecar.mesh import watch as propagation
from cascadebreaker.sidecar.mesh.hop_memo import MemoHopTrust
from cascadebreaker.sidecar.mesh.node import CascadeNode
from cascadebreaker.sidecar.mesh.plugin import cascade_node
from cascadebreaker.sidecar.mesh.watch import WatchHub, peer_host
from cascadebreaker.sidecar.proxy.hooks import BareCallHook, Direction, RequestHook, RequestInfo
from cascadebreaker.sidecar.proxy.ports import WatchEnded, WatchSubscription
from cascadebreaker.sidecar.proxy.runtime import SidecarRuntime
from cascadebreaker.sidecar.schema import ConfigError, parse_cascade_config, parse_config
from cascadebreaker.sidecar.server import build_runtime
from cascadebreaker.testing.ports import free_port


def _config(cascade: dict[str, Any] | None = None) -> Any:
    return parse_config(
        {
            "service": "checkout",
            "listen": {"inbound": None, "grpc": "127.0.0.1:15999"},
            "upstreams": {"payment": {"url": "http://127.0.0.1:9"}},
            "cascade": cascade,
        }
    )


@pytest.mark.parametrize(
    ("cascade", "key"),
    [
        ({"edges": [{"caller": "checkout POST", "callee": "payment GET /x"}]}, "edges.0.caller"),
        ({"peers": {"payment": "no-port"}}, "peers"),
        ({"advertise": "host"}, "advertise"),
        ({"redis": "http://x"}, "redis"),
        ({"nats": "http://x"}, "nats"),
        ({"quorum": 0}, "quorum"),
        ({"quorum": 1.5}, "quorum"),
        ({"instance": "has space"}, "instance"),
        ({"presence_interval": 0}, "presence_interval"),
        ({"edge_ttl": 0}, "edge_ttl"),
        ({"namespace": "a b"}, "namespace"),
        ({"unknown": 1}, "unknown"),
    ],
)
def test_bad_cascade_config_names_the_key(cascade: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=rf"^cascade\.{key}"):
        parse_cascade_config(cascade)


def test_defaults_and_a_full_section() -> None:
    assert parse_cascade_config(None).enabled
    config = parse_cascade_config(
        {
            "secret": "s",
            "templates": {"payment": ["/v1/charges/{charge}"]},
            "edges": [{"caller": "a GET /x", "callee": "b GET /y", "optional": True}],
            "alternatives": {"payment": "payment-backup"},
            "peers": {"payment": "127.0.0.1:15102"},
        }
    )
    assert config.edges[0].optional
    assert config.alternatives == {"payment": "payment-backup"}


async def test_no_secret_warns_at_start_up(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CCB_SECRET", raising=False)
    with caplog.at_level(logging.WARNING, logger="cascadebreaker.sidecar.cascade"):
        runtime = build_runtime(_config())
    runtime.close()
    assert any("unauthenticated" in r.getMessage() for r in caplog.records)


async def test_cascade_can_be_switched_off() -> None:
    runtime = build_runtime(_config({"enabled": False}))
    try:
        assert cascade_node(runtime) is None
        assert not runtime.hooks
        assert "/availability" not in runtime.admin_routes
    finally:
        runtime.close()


async def test_availability_route_answers_and_rejects_bad_queries() -> None:
    runtime = build_runtime(_config({"secret": "s"}))
    try:
        answer = runtime.admin_routes["/availability"]
        assert answer("endpoint=POST%20/v1/orders")[0] == 200
        assert answer("endpoint=POST%20/v1/orders")[1]["available"] is True
        assert answer("upstream=payment")[1]["endpoint"] == "payment * *"
        assert answer("")[0] == 400
        assert answer("endpoint=orders")[0] == 400
        assert answer("upstream=nope&endpoint=GET%20/x")[0] == 404
        status = runtime.status()["cascade"]
        assert status["secret"] is True
        assert status["unavailable"] == []
    finally:
        runtime.close()


def test_peer_host_parses_grpc_peers() -> None:
    assert peer_host("ipv4:127.0.0.1:5000") == "127.0.0.1"
    assert peer_host("ipv6:[::1]:5000") == "::1"
    assert peer_host("unix:/tmp/x") == "/tmp/x"


def _update(version: int) -> AvailabilityUpdate:
    endpoint = Endpoint("checkout", "POST", "/v1/orders")
    chain = (Cause(Endpoint.service_wide("payment"), "circuit open"), Cause(endpoint, "requires"))
    return AvailabilityUpdate("checkout", endpoint, False, chain, time.time() + 30, version)


async def test_hub_refuses_remote_subscribers_without_a_secret() -> None:
    hub = WatchHub(lambda since: [_update(1)], loopback_only=True)
    remote = WatchSubscription("x", (), 0, "ipv4:10.1.2.3:5000")
    assert [u async for u in hub.source(remote)] == []


async def test_hub_streams_current_state_then_live_updates_with_a_filter() -> None:
    hub = WatchHub(lambda since: [_update(1)], loopback_only=True)
    local = WatchSubscription("x", ("POST /v1/orders",), 0, "ipv4:127.0.0.1:5000")
    other = WatchSubscription("y", ("GET /other",), 0, "ipv4:127.0.0.1:5001")
    got: list[int] = []
    got_other: list[int] = []

    async def collect(subscription: WatchSubscription, into: list[int]) -> None:
        async for update in hub.source(subscription):
            into.append(update.version)

    async def read(subscription: WatchSubscription, into: list[int]) -> None:
        with pytest.raises(WatchEnded, match="shutting down: reconnect with since_version"):
            await collect(subscription, into)

    tasks = [asyncio.create_task(read(local, got)), asyncio.create_task(read(other, got_other))]
    for _ in range(1000):  # both generators register on their first step
        if hub.subscribers == 2:
            break
        await asyncio.sleep(0)
    assert hub.subscribers == 2
    hub.publish([_update(2), _update(3)])
    hub.close()  # ends both streams
    await asyncio.gather(*tasks)
    assert got == [1, 2, 3]
    assert got_other == []
    # A subscriber arriving while the sidecar drains is told the same at once.
    await read(local, got)
    assert got == [1, 2, 3]


def test_memoised_hop_tokens_stay_bound_to_their_request_and_time() -> None:
    trust = MemoHopTrust(b"s", max_skew=60)
    now = time.time()
    token = trust.issue("checkout", now, "GET /x||")
    assert trust.issue("checkout", now, "GET /x||") == token
    assert trust.check(token, peer_host="10.0.0.1", now=now, material="GET /x||").trusted
    # Remembered, yet still bound to the material and to the clock.
    assert trust.check(token, peer_host="10.0.0.1", now=now, material="GET /y||").trusted is False
    assert (
        trust.check(token, peer_host="10.0.0.1", now=now + 120, material="GET /x||").trusted
        is False
    )
    forged = token[:-1] + ("1" if token.endswith("0") else "0")
    assert not trust.check(forged, peer_host="10.0.0.1", now=now, material="GET /x||").trusted
    unsigned = MemoHopTrust(None)
    token = unsigned.issue("checkout", now)
    assert unsigned.check(token, peer_host="127.0.0.1", now=now).trusted
    assert unsigned.check(token, peer_host="10.0.0.1", now=now).trusted is False


def test_the_cli_refuses_a_bad_cascade_section(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("service: x\nlisten: {inbound: null}\ncascade: {peers: {a: nope}}\n")
    done = subprocess.run(
        [sys.executable, "-m", "cascadebreaker.cli", "sidecar", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "cascade.peers: must be host:port" in done.stderr


async def test_a_propagated_unavailability_reroutes_to_the_alternative() -> None:
    config = parse_config(
        {
            "service": "checkout",
            "listen": {"inbound": None, "grpc": None},
            "upstreams": {
                "payment": {"url": "http://127.0.0.1:9"},
                "backup": {"url": "http://127.0.0.1:9"},
            },
            "cascade": {"alternatives": {"payment": "backup"}, "secret": "s"},
        }
    )
    runtime = build_runtime(config)
    try:
        node = cascade_node(runtime)
        assert node is not None
        hook = runtime.hooks.hooks[0]

        def outbound() -> tuple[Any, RequestInfo]:
            info = RequestInfo(
                Direction.OUTBOUND,
                "checkout",
                "payment",
                b"POST",
                b"/v1/charges",
                [],
                "127.0.0.1",
                runtime.route_resolver,
            )
            return hook.on_request(info), info

        rejection, info = outbound()
        assert rejection is None and info.reroute is None
        for service, version in (("payment", 1), ("backup", 2)):
            endpoint = Endpoint(service, "POST", "/v1/charges")
            chain = (Cause(Endpoint.service_wide("ledger"), "circuit open"), Cause(endpoint, "r"))
            update = sign(
                AvailabilityUpdate(service, endpoint, False, chain, time.time() + 30, version),
                b"s",
            )
            assert node.table.receive(update).verdict is Verdict.ACCEPTED
            rejection, info = outbound()
            if service == "payment":  # the primary is down: the call goes to the alternative
                assert rejection is None and info.reroute == "backup"
            else:  # both down: refused, with the primary's cause chain
                assert rejection is not None and rejection.status == 503
                assert rejection.body["causeChain"][0]["endpoint"] == "ledger * *"
    finally:
        runtime.close()


@pytest.fixture
async def signing_checkout() -> AsyncIterator[tuple[SidecarRuntime, CascadeNode, RequestHook]]:
    """A checkout sidecar's runtime with the cascade on (a secret: it signs hop tokens), its
    node and its cascade hook."""
    config = parse_config(
        {
            "service": "checkout",
            "listen": {"inbound": None, "grpc": None},
            "upstreams": {"payment": {"url": "http://127.0.0.1:9"}},
            "cascade": {"secret": "s"},
        }
    )
    runtime = build_runtime(config)
    try:
        node = cascade_node(runtime)
        assert node is not None
        yield runtime, node, runtime.hooks.hooks[0]
    finally:
        runtime.close()


def _outbound_to_payment(runtime: SidecarRuntime, method: bytes, path: bytes) -> RequestInfo:
    return RequestInfo(
        Direction.OUTBOUND,
        "checkout",
        "payment",
        method,
        path,
        [],
        "127.0.0.1",
        runtime.route_resolver,
    )


def _hop_trusted(node: CascadeNode, token: bytes, method: str, path: str) -> bool:
    """Whether the hop token verifies for that very call line."""
    check = node.learner.trust.check(
        token.decode(),
        peer_host="10.0.0.1",
        now=time.time(),
        material=hop_material(method, path, None),
    )
    return check.trusted


async def test_a_bare_outbound_call_is_named_anew_once_a_template_is_added(
    signing_checkout: tuple[SidecarRuntime, CascadeNode, RequestHook],
) -> None:
    # The hook remembers how it named a call without cascade headers; a template added later
    # must rename it (and the refusal follow the new name), and the remembered hop token must
    # verify for that very call.
    runtime, node, hook = signing_checkout

    def outbound() -> tuple[Any, RequestInfo]:
        info = _outbound_to_payment(runtime, b"GET", b"/v1/charges/abc")
        return hook.on_request(info), info

    for _ in range(2):  # named on first sight, then remembered
        rejection, info = outbound()
        assert rejection is None
        assert info.state.callee == Endpoint("payment", "GET", "/v1/charges/abc")
        [(name, token)] = info.add_headers
        assert name == b"ccb-hop"
        assert _hop_trusted(node, token, "GET", "/v1/charges/abc")
    node.templates.add("payment", "/v1/charges/{id}")
    templated = Endpoint("payment", "GET", "/v1/charges/{id}")
    rejection, info = outbound()
    assert rejection is None and info.state.callee == templated
    chain = (Cause(Endpoint.service_wide("ledger"), "circuit open"), Cause(templated, "r"))
    update = sign(AvailabilityUpdate("payment", templated, False, chain, time.time() + 30, 1), b"s")
    assert node.table.receive(update).verdict is Verdict.ACCEPTED
    rejection, _ = outbound()
    assert rejection is not None and rejection.status == 503


async def test_each_call_line_is_named_and_signed_for_itself_whatever_came_before(
    signing_checkout: tuple[SidecarRuntime, CascadeNode, RequestHook],
) -> None:
    # The hook remembers the last call line and compares the next one with it as sent (bytes):
    # lines that differ in one byte of the method or the path, alternating, are each named
    # and signed for themselves (a latin-1 path as well).
    runtime, node, hook = signing_checkout
    lines = [
        (b"GET", b"/v1/charges/abc"),
        (b"PUT", b"/v1/charges/abc"),
        (b"GET", b"/v1/charges/abd"),
        (b"GET", b"/v1/charges/abc"),
        (b"GET", b"/v1/caf\xe9"),
        (b"GET", b"/v1/caf\xe9"),
        (b"GET", b"/v1/charges/abc"),
    ]
    for method, path in lines:
        info = _outbound_to_payment(runtime, method, path)
        assert hook.on_request(info) is None
        named = (method.decode(), path.decode("latin-1"))
        assert info.state.callee == Endpoint("payment", *named)
        [(_, token)] = info.add_headers
        assert _hop_trusted(node, token, *named), (method, path)


async def test_a_settled_bare_call_carries_a_hop_token_line_for_that_very_call(
    signing_checkout: tuple[SidecarRuntime, CascadeNode, RequestHook],
) -> None:
    # The pipeline asks the hook to settle a bare call without a RequestInfo: the line it
    # forwards must hold a hop token that verifies for that call line, and a call the hook
    # has something to read or refuse in must be left to on_request.
    runtime, node, hook = signing_checkout
    assert isinstance(hook, BareCallHook)
    plain = [(b"X-Settle-Test", b"1")]  # a name not seen before: on_request reads it first
    assert hook.settle("payment", b"GET", b"/v1/charges/abc", plain) is None
    info = _outbound_to_payment(runtime, b"GET", b"/v1/charges/abc")
    info.headers = plain
    assert hook.on_request(info) is None  # and remembers it as plain
    lines = [(b"GET", b"/v1/charges/abc"), (b"PUT", b"/v1/charges/abc"), (b"GET", b"/v1/caf\xe9")]
    for method, path in [*lines, *lines]:
        settled = hook.settle("payment", method, path, plain)
        assert settled is not None and settled.hook is hook
        name, _, token = settled.lines.removesuffix(b"\r\n").partition(b": ")
        assert name == b"ccb-hop" and b"\r" not in token
        assert _hop_trusted(node, token, method.decode(), path.decode("latin-1"))
    trace = [(b"traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")]
    assert hook.settle("payment", b"GET", b"/v1/charges/abc", [*plain, *trace]) is None
    endpoint = Endpoint("payment", "GET", "/v1/charges/abc")
    chain = (Cause(Endpoint.service_wide("ledger"), "circuit open"), Cause(endpoint, "r"))
    update = sign(AvailabilityUpdate("payment", endpoint, False, chain, time.time() + 30, 1), b"s")
    assert node.table.receive(update).verdict is Verdict.ACCEPTED
    assert hook.settle("payment", b"GET", b"/v1/charges/abc", plain) is None  # refused:
    rejection = hook.on_request(_outbound_to_payment(runtime, b"GET", b"/v1/charges/abc"))
    assert rejection is not None and rejection.status == 503  # on_request explains it


def _inbound_to_payment(
    runtime: SidecarRuntime, path: bytes, headers: list[tuple[bytes, bytes]]
) -> RequestInfo:
    """A GET reaching payment's app from a caller at 10.0.0.1, as the inbound listener makes it."""
    return RequestInfo(
        Direction.INBOUND,
        "payment",
        "payment",
        b"GET",
        path,
        headers,
        "10.0.0.1",
        runtime.route_resolver,
    )


async def test_a_settled_inbound_call_verifies_its_hop_token_and_hides_it_from_the_app(
    signing_checkout: tuple[SidecarRuntime, CascadeNode, RequestHook],
) -> None:
    # The callee's hook settles a call whose only cascade header is a caller's hop token: the
    # token must still verify for that very line and peer (or the caller gets no peer claim),
    # the app must never see it, and anything else to read, refuse or begin is on_request's.
    caller = signing_checkout[1]
    config = parse_config(
        {
            "service": "payment",
            "listen": {"inbound": None, "grpc": None},
            "upstreams": {"ledger": {"url": "http://127.0.0.1:9"}},
            "cascade": {
                "secret": "s",
                "advertise": "10.0.0.2:15002",
                "templates": {"payment": ["/v1/charges/{id}"]},
                "edges": [
                    {"caller": "payment GET /v1/charges/{id}", "callee": "ledger GET /entries"}
                ],
            },
        }
    )
    runtime = build_runtime(config)
    try:
        hook = runtime.hooks.hooks[0]
        assert isinstance(hook, BareCallHook)
        accept = [(b"Accept", b"*/*")]
        info = _inbound_to_payment(runtime, b"/v1/a", list(accept))
        assert hook.on_request(info) is None  # a name not seen before: remembered as plain

        def token(method: str, path: str) -> bytes:
            material = hop_material(method, path, None)
            return caller.learner.trust.issue("checkout", time.time(), material).encode()

        lines = [
            (b"GET", b"/v1/charges/abc"),
            (b"PUT", b"/v1/charges/abc"),
            (b"GET", b"/v1/caf\xe9"),
        ]
        for method, path in [*lines, *lines]:
            hop = token(method.decode(), path.decode("latin-1"))
            headers = [*accept, (b"ccb-hop", hop)]
            received = hook.settle_inbound(method, path, headers, "10.0.0.1")
            assert received is not None and received.hook is hook
            assert headers == accept  # the app never sees the token
            answer: list[tuple[bytes, bytes]] = [(b"Server", b"app")]
            hook.settled_response("payment", received, 200, "success", answer)
            [claim] = [v for n, v in answer if n == b"ccb-sidecar-grpc"]  # a verified caller
            address, _, claim_token = claim.decode().partition(" ")
            check = caller.learner.trust.check(
                claim_token,
                peer_host="10.0.0.2",
                now=time.time(),
                material=f"grpc|{address}|{hop.decode()}",
            )
            assert address == "10.0.0.2:15002" and check.trusted and check.service == "payment"
        # A token made for another line (or forged) is no caller's: settled, stripped, no claim.
        hop = token("GET", "/v1/charges/abc")
        for method, path, value in [(b"DELETE", b"/v1/charges/abc", hop), (b"GET", b"/x", b"f")]:
            headers = [(b"CCB-Hop", value)]
            received = hook.settle_inbound(method, path, headers, "10.0.0.1")
            assert received is not None and headers == []
            answer = []
            hook.settled_response("payment", received, 200, "success", answer)
            assert answer == []
        # A trace to follow, a learning header, a second cascade header: on_request's.
        trace = (b"traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        for extra in [trace, (b"ccb-serving-endpoint", b"GET /a"), (b"ccb-other", b"1")]:
            headers = [(b"ccb-hop", hop), extra]
            assert hook.settle_inbound(b"GET", b"/v1/charges/abc", headers, "10.0.0.1") is None
            assert headers == [(b"ccb-hop", hop), extra]  # left as they came
        # Our own endpoint unavailable (its required dependency is): on_request refuses it.
        ledger = Endpoint("ledger", "GET", "/entries")
        chain = (Cause(ledger, "circuit open"),)
        update = sign(AvailabilityUpdate("ledger", ledger, False, chain, time.time() + 30, 1), b"s")
        node = cascade_node(runtime)
        assert node is not None and node.table.receive(update).verdict is Verdict.ACCEPTED
        headers = [(b"ccb-hop", hop)]
        assert hook.settle_inbound(b"GET", b"/v1/charges/abc", headers, "10.0.0.1") is None
        assert headers == [(b"ccb-hop", hop)]
        info = _inbound_to_payment(runtime, b"/v1/charges/abc", headers)
        rejection = hook.on_request(info)
        assert rejection is not None and rejection.status == 503
        assert b"ledger" in rejection.to_bytes()
    finally:
        runtime.close()


async def test_no_inbound_call_is_settled_where_a_trace_would_begin() -> None:
    # `start_traces`: every request without trace context gets one, which the app must see.
    config = parse_config(
        {
            "service": "payment",
            "listen": {"inbound": None, "grpc": None},
            "upstreams": {},
            "cascade": {"secret": "s", "start_traces": True},
        }
    )
    runtime = build_runtime(config)
    try:
        hook = runtime.hooks.hooks[0]
        assert isinstance(hook, BareCallHook)
        assert hook.settle_inbound(b"GET", b"/v1/a", [], "10.0.0.1") is None
        info = _inbound_to_payment(runtime, b"/v1/a", [])
        assert hook.on_request(info) is None
        assert [n for n, _ in info.headers] == [b"traceparent"]
    finally:
        runtime.close()


async def test_header_names_remembered_as_plain_never_hide_the_cascades_own() -> None:
    # The hook remembers raw names that carry nothing for it; a request or response with the
    # cascade's headers among remembered names (any case) is still read and stripped.
    config = parse_config(
        {
            "service": "checkout",
            "app": "http://127.0.0.1:9",
            "listen": {"inbound": "127.0.0.1:0", "grpc": None},
            "upstreams": {"payment": {"url": "http://127.0.0.1:9"}},
            "cascade": {"secret": "s"},
        }
    )
    runtime = build_runtime(config)
    plain = [(b"User-Agent", b"t"), (b"Accept", b"*/*")]
    answer = [(b"Server", b"t"), (b"Content-Type", b"text/plain")]
    trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    try:
        hook = runtime.hooks.hooks[0]

        def call(direction: Direction, headers: list[tuple[bytes, bytes]]) -> RequestInfo:
            target = "payment" if direction is Direction.OUTBOUND else "checkout"
            info = RequestInfo(
                direction,
                "checkout",
                target,
                b"GET",
                b"/v1/x",
                headers,
                "127.0.0.1",
                runtime.route_resolver,
            )
            assert hook.on_request(info) is None
            return info

        for _ in range(2):  # seen, then remembered as plain
            info = call(Direction.INBOUND, list(plain))
            assert info.headers == plain
            info.response_headers = list(answer)
            hook.on_response(info, 200, "success")
            assert info.response_headers == answer
            info = call(Direction.OUTBOUND, list(plain))
            info.response_headers = list(answer)
            hook.on_response(info, 200, "success")
            assert info.response_headers == answer
        sent = [*plain, (b"CCB-Serving-Endpoint", b"GET /a"), (b"Ccb-Other", b"1")]
        info = call(Direction.INBOUND, [*sent, (b"TraceParent", trace.encode())])
        assert info.headers == [*plain, (b"TraceParent", trace.encode())]
        assert info.state.trace_key == "0af7651916cd43dd8448eb211c80319c"  # the trace began
        info.response_headers = [*answer, (b"CCB-Sidecar-Grpc", b"x"), (b"CCB-Refusal", b"y")]
        hook.on_response(info, 200, "success")
        assert info.response_headers == answer
        info = call(Direction.OUTBOUND, [*plain, (b"CCB-Hop", b"forged")])
        [(name, token)] = [
            (n, v) for n, v in info.headers + info.add_headers if n.lower() == b"ccb-hop"
        ]
        assert name == b"ccb-hop" and token != b"forged"  # the app's token is not passed on
        info.response_headers = [*answer, (b"Ccb-Sidecar-Grpc", b"x")]
        hook.on_response(info, 200, "success")
        assert info.response_headers == answer
    finally:
        runtime.close()


async def test_an_unreachable_peer_is_retried_then_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(propagation, "_GIVE_UP", 0.3)
    monkeypatch.setattr(propagation, "_BACKOFF_MAX", 0.05)
    forgotten: list[str] = []
    done = asyncio.Event()

    def forget(address: str) -> None:
        forgotten.append(address)
        done.set()

    peers = propagation.PeerWatchers(
        "checkout", lambda u, a: Verdict.ACCEPTED, loopback_only=True, on_forget=forget
    )
    address = f"127.0.0.1:{_closed_port()}"
    assert peers.ensure(address)
    assert peers.ensure(address)
    assert peers.peers == [address]  # one subscription per address
    assert not peers.ensure("10.0.0.1:5000")  # no secret: loopback peers only
    async with asyncio.timeout(30):
        await done.wait()
    assert forgotten == [address]
    assert peers.peers == []
    assert peers.reconnects >= 2
    peers.close()


def _closed_port() -> int:
    return free_port()


async def test_a_dotted_service_name_forwards_without_a_hop_token(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = parse_config(
        {
            "service": "pay.v2",
            "listen": {"inbound": None, "grpc": None},
            "upstreams": {"ledger": {"url": "http://127.0.0.1:9"}},
            "cascade": {"secret": "s"},
        }
    )
    with caplog.at_level(logging.WARNING, logger="cascadebreaker.sidecar.cascade"):
        runtime = build_runtime(config)
    try:
        info = RequestInfo(
            Direction.OUTBOUND, "pay.v2", "ledger", b"GET", b"/x", [], "", runtime.route_resolver
        )
        assert runtime.hooks.hooks[0].on_request(info) is None
        assert info.add_headers == []
        assert any("cascade.peers" in r.getMessage() for r in caplog.records)
    finally:
        runtime.close()


async def test_a_shared_bus_keeps_only_updates_about_services_we_call() -> None:
    """Redis and NATS carry the fleet's updates: a sidecar holds only its upstreams'."""
    runtime = build_runtime(_config({"secret": "s"}))
    try:
        node = cascade_node(runtime)
        assert node is not None
        for service in ("payment", "mailer"):
            endpoint = Endpoint(service, "POST", "/x")
            cause = (Cause(Endpoint.service_wide("bank"), "circuit open"), Cause(endpoint, "r"))
            update = AvailabilityUpdate(
                service, endpoint, False, cause, time.time() + 30, 1, instance=f"{service}-1"
            )
            node._from_redis(sign(update, b"s"))
        assert node.check(Endpoint("payment", "POST", "/x")) is not None
        assert node.check(Endpoint("mailer", "POST", "/x")) is None  # not an upstream
        assert node.stats["ignored_redis"] == 1
        assert node.table.counters["received"] == 1
    finally:
        runtime.close()
