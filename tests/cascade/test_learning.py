"""The per-request hooks: naming endpoints, learning edges, trust of learning headers."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cascadebreaker.cascade import (
    AvailabilityTable,
    DependencyGraph,
    EdgeSource,
    HopTrust,
    Learner,
    RouteTemplates,
    TraceTable,
    hop_material,
)
from cascadebreaker.cascade.trust import HOP_HEADER, OPTIONAL_HEADER, SERVING_ENDPOINT_HEADER

from .helpers import FakeClock, ep

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def traceparent(span: str) -> str:
    return f"00-{TRACE}-{span}-01"


def learner(clock: FakeClock, service: str = "checkout", secret: bytes | None = b"k") -> Learner:
    table = AvailabilityTable(service, DependencyGraph(clock), clock=clock, wall_clock=clock.wall)
    return Learner(
        table,
        RouteTemplates({"payment": ["/v1/charges/{charge}"]}),
        TraceTable(clock),
        HopTrust(secret),
        wall_clock=clock.wall,
    )


def test_edge_learned_from_traceparent_alone(clock: FakeClock) -> None:
    hooks = learner(clock)
    inbound = hooks.inbound(
        "POST", "/v1/orders/42", {"traceparent": traceparent("a" * 16)}.get, peer_host="127.0.0.1"
    )
    assert inbound.endpoint == ep("checkout POST /v1/orders/{id}")
    assert inbound.refusal is None
    # The app calls out with the same trace id and a new span id.
    out = hooks.outbound(
        "payment", "post", "/v1/charges/ch_1?x=1", {"traceparent": traceparent("b" * 16)}.get
    )
    assert out.callee == ep("payment POST /v1/charges/{id}")
    assert out.caller == inbound.endpoint
    assert hooks.table.graph.source(out.caller, out.callee) is EdgeSource.TRACE
    hooks.inbound_done(inbound.trace_key)


def test_explicit_serving_header_wins_and_is_normalised(clock: FakeClock) -> None:
    hooks = learner(clock)
    headers = {
        "ccb-serving-endpoint": "checkout POST /v1/orders/{order}",
        "traceparent": traceparent("b" * 16),
    }
    out = hooks.outbound("payment", "POST", "/v1/charges/ch_1", headers.get)
    assert out.caller == ep("checkout POST /v1/orders/{id}")
    assert hooks.table.graph.source(out.caller, out.callee) is EdgeSource.HEADER


@pytest.mark.parametrize("named", ["payment POST /v1/charges", "not an endpoint", "checkout POST"])
def test_serving_header_for_another_service_or_malformed_is_ignored(
    clock: FakeClock, named: str
) -> None:
    hooks = learner(clock)
    for _ in range(2):  # the second call is answered from the parsed-header cache
        out = hooks.outbound(
            "payment", "POST", "/v1/charges/1", {"ccb-serving-endpoint": named}.get
        )
        assert out.caller is None
    assert len(hooks.table.graph) == 0


def test_optional_header_marks_the_edge(clock: FakeClock) -> None:
    hooks = learner(clock)
    headers = {"ccb-serving-endpoint": "checkout GET /page", "ccb-optional": "1"}
    out = hooks.outbound("reco", "GET", "/suggest", headers.get)
    assert out.caller is not None
    edge = hooks.table.graph.edge(out.caller, out.callee)
    assert edge is not None
    assert not edge.required


def test_outbound_refused_while_target_unavailable_and_learning_reports_updates(
    clock: FakeClock,
) -> None:
    hooks = learner(clock)
    hooks.table.breaker_opened(ep("payment POST /v1/charges/{id}"), 20.0)
    headers = {"ccb-serving-endpoint": "checkout POST /v1/orders"}
    out = hooks.outbound("payment", "POST", "/v1/charges/9", headers.get)
    assert out.refusal is not None
    assert [str(c.endpoint) for c in out.refusal.cause_chain] == ["payment POST /v1/charges/{id}"]
    assert [(str(u.endpoint), u.available) for u in out.updates] == [
        ("checkout POST /v1/orders", False)
    ]
    # Our own endpoint is now refused at the inbound listener, before the app.
    inbound = hooks.inbound("POST", "/v1/orders", {}.get, peer_host="127.0.0.1")
    assert inbound.refusal is not None
    assert inbound.trace_key is None


def test_hop_token_from_a_sidecar_is_trusted(clock: FakeClock) -> None:
    caller, callee = learner(clock, "checkout"), learner(clock, "payment")
    headers = {"ccb-serving-endpoint": "checkout POST /v1/orders"}
    token = caller.hop_token("POST", "/v1/charges/1", headers.get)
    headers["ccb-hop"] = token
    inbound = callee.inbound("POST", "/v1/charges/1", headers.get, peer_host="10.1.2.3")
    assert inbound.from_sidecar


def test_outside_client_learning_headers_are_not_trusted(clock: FakeClock) -> None:
    callee = learner(clock, "payment")
    forged = {"ccb-serving-endpoint": "checkout POST /v1/orders", "ccb-hop": "v1.checkout.1.-"}
    assert not callee.inbound(
        "POST", "/v1/charges/1", forged.get, peer_host="10.9.9.9"
    ).from_sidecar
    # A token copied from another request does not cover different learning headers.
    caller = learner(clock, "checkout")
    token = caller.hop_token("POST", "/v1/charges/1", {}.get)
    smuggled = {"ccb-serving-endpoint": "checkout POST /evil", "ccb-hop": token}
    assert not callee.inbound(
        "POST", "/v1/charges/1", smuggled.get, peer_host="10.9.9.9"
    ).from_sidecar
    assert not callee.inbound("POST", "/v1/charges/1", {}.get, peer_host="127.0.0.1").from_sidecar


def test_learning_from_traces_can_be_switched_off(clock: FakeClock) -> None:
    hooks = learner(clock)
    hooks.learn_from_traces = False
    headers = {"traceparent": traceparent("a" * 16)}
    inbound = hooks.inbound("GET", "/x", headers.get, peer_host="127.0.0.1")
    assert inbound.trace_key is None
    assert hooks.outbound("payment", "GET", "/y", headers.get).caller is None


def test_a_call_without_learning_headers_takes_the_bare_path_to_the_same_decision(
    clock: FakeClock,
) -> None:
    # The sidecar's fast path for a call carrying none of the headers the hooks read must
    # decide exactly what the general path decides with an empty getter: callee, refusal, token.
    hooks = learner(clock)
    full = hooks.outbound("payment", "post", "/v1/charges/ch_9?x=1", {}.get)
    assert hooks.outbound_bare("payment", "post", "/v1/charges/ch_9?x=1") == (
        full.callee,
        full.refusal,
    )
    assert full.caller is None and full.updates == () and full.trace_key is None
    hooks.table.breaker_opened(full.callee, retry_after=30.0)
    refused = hooks.outbound("payment", "POST", "/v1/charges/ch_9", {}.get)
    assert refused.refusal is not None
    assert hooks.outbound_bare("payment", "POST", "/v1/charges/ch_9") == (
        refused.callee,
        refused.refusal,
    )
    assert hooks.hop_token("POST", "/v1/charges/1", None) == hooks.hop_token(
        "POST", "/v1/charges/1", {}.get
    )


_CALL_LINES = st.tuples(
    st.sampled_from(["GET", "post"]),
    st.sampled_from(["/v1/charges/1", "/v1/charges/2"]),
    st.sampled_from([None, "checkout GET /cart", "checkout POST /cart"]),
    st.sampled_from([None, "1", "yes"]),
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_CALL_LINES, min_size=1, max_size=10))
def test_inbound_tokens_bind_what_a_fresh_material_binds(
    clock: FakeClock, lines: list[tuple[str, str, str | None, str | None]]
) -> None:
    """The learner remembers the last material it made for an inbound token; whatever came
    before, a token is trusted exactly when it was issued for this very line and headers."""
    issuer = HopTrust(b"k")
    hooks = learner(clock)
    for method, path, serving, optional in lines:
        headers = {
            name: value
            for name, value in ((SERVING_ENDPOINT_HEADER, serving), (OPTIONAL_HEADER, optional))
            if value is not None
        }
        material = hop_material(method, path, headers.get)
        for bound in (material, hop_material("GET", "/v1/charges/1", None)):
            token = issuer.issue("cart", clock.wall(), bound)
            decision = hooks.inbound(
                method, path, {**headers, HOP_HEADER: token}.get, peer_host="10.0.0.1"
            )
            assert decision.from_sidecar is (bound == material)


def _forged(token: str) -> str:
    return token[:-1] + ("1" if token.endswith("0") else "0")  # one MAC digit changed


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["GET", "post"]),
            st.sampled_from(["/v1/charges/1", "/v1/orders/2"]),
            st.sampled_from(["issued", "other line", "forged", ""]),
            st.sampled_from(["10.0.0.1", "127.0.0.1"]),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_a_hop_token_alone_is_decided_as_by_the_general_hook(
    clock: FakeClock, requests: list[tuple[str, str, str, str]]
) -> None:
    """`inbound_hop` (the sidecar's shortcut for a request carrying only a hop token) decides
    what `inbound` decides from a getter holding only that token."""
    issuer = HopTrust(b"k")
    general, shortcut = learner(clock), learner(clock)
    for method, path, kind, peer in requests:
        material = hop_material(method, path, None)
        token = {
            "issued": issuer.issue("cart", clock.wall(), material),
            "other line": issuer.issue("cart", clock.wall(), "GET /elsewhere||"),
            "forged": _forged(issuer.issue("cart", clock.wall(), material)),
            "": "",
        }[kind]
        expected = general.inbound(method, path, {HOP_HEADER: token}.get, peer_host=peer)
        got = shortcut.inbound_hop(method, path, token, peer_host=peer)
        assert (got.endpoint, got.refusal, got.from_sidecar, got.trace_key) == (
            expected.endpoint,
            expected.refusal,
            expected.from_sidecar,
            expected.trace_key,
        )
        assert got.from_sidecar is (kind == "issued")
