"""Learned optionality: evidence per edge, its ageing, marks that win, and the trickle."""

from __future__ import annotations

import os

import pytest

from cascadebreaker.cascade import (
    OPTIONALITY_LEARNED,
    OPTIONALITY_MARKED,
    OPTIONALITY_REQUIRED,
    AvailabilityTable,
    DependencyGraph,
    Evidence,
    HopTrust,
    Learner,
    OptionalityRules,
    RouteTemplates,
    SurvivalLedger,
    TraceTable,
    TrickleGate,
    hop_material,
)

from .helpers import FakeClock, ep

PAGE, WIDGET = ep("report GET /reports/settlements"), ep("settlement GET /v1/settlements")


def test_survivals_make_an_edge_optional_and_failures_make_it_required_again(
    clock: FakeClock,
) -> None:
    ledger = SurvivalLedger(clock, OptionalityRules(threshold=3, ratio=0.8))
    assert ledger.observe(PAGE, WIDGET, True) is None
    assert ledger.observe(PAGE, WIDGET, True) is None
    assert ledger.observe(PAGE, WIDGET, True) is True  # the third survival decides
    assert ledger.optional(PAGE, WIDGET)
    # Between the two thresholds the verdict holds (no flapping on one request).
    assert ledger.observe(PAGE, WIDGET, False) is None
    assert ledger.observe(PAGE, WIDGET, False) is None
    assert ledger.optional(PAGE, WIDGET)
    assert ledger.observe(PAGE, WIDGET, False) is False  # 3 of 6 survived: required again
    assert not ledger.optional(PAGE, WIDGET)
    evidence = ledger.evidence(PAGE, WIDGET)
    assert evidence == Evidence(3.0, 3.0, False)


def test_mostly_failing_callers_are_not_optional(clock: FakeClock) -> None:
    ledger = SurvivalLedger(clock, OptionalityRules(threshold=3, ratio=0.8))
    for survived in (True, False, True, False, True, False, True):
        ledger.observe(PAGE, WIDGET, survived)
    assert not ledger.optional(PAGE, WIDGET)  # 4 of 7 survived: below 80 %


def test_evidence_ages_and_is_forgotten(clock: FakeClock) -> None:
    ledger = SurvivalLedger(clock, OptionalityRules(threshold=3, half_life=10, ttl=100))
    for _ in range(4):
        ledger.observe(PAGE, WIDGET, True)
    clock.advance(9)
    evidence = ledger.evidence(PAGE, WIDGET)
    assert evidence is not None and evidence.survived == 4.0  # within one half-life
    clock.advance(1)
    evidence = ledger.evidence(PAGE, WIDGET)
    assert evidence is not None and evidence.survived == 2.0
    assert evidence.optional  # ageing weighs the evidence; it does not undo the verdict
    clock.advance(100)
    assert ledger.expire() == [(PAGE, WIDGET)]
    assert ledger.evidence(PAGE, WIDGET) is None and len(ledger) == 0


def test_the_ledger_is_bounded(clock: FakeClock) -> None:
    ledger = SurvivalLedger(clock, OptionalityRules(max_edges=1))
    ledger.observe(PAGE, WIDGET, True)
    ledger.observe(PAGE, ep("other GET /x"), True)
    assert len(ledger) == 1 and ledger.dropped == 1


@pytest.mark.parametrize(
    "rules",
    [
        {"threshold": 0},
        {"ratio": 0},
        {"ratio": 1.5},
        {"half_life": 0},
        {"ttl": -1},
        {"max_edges": 0},
    ],
)
def test_bad_rules_are_refused(rules: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        OptionalityRules(**rules)  # type: ignore[arg-type]


def test_marks_and_config_win_over_evidence(clock: FakeClock) -> None:
    graph = DependencyGraph(clock)
    graph.observe(PAGE, WIDGET)
    assert graph.optionality(PAGE, WIDGET) == OPTIONALITY_REQUIRED
    assert graph.set_learned_optional(PAGE, WIDGET, True)
    assert graph.optionality(PAGE, WIDGET) == OPTIONALITY_LEARNED
    assert not graph.edge(PAGE, WIDGET).required  # type: ignore[union-attr]
    assert not graph.observe(PAGE, WIDGET)  # a plain call does not undo the learned verdict
    graph.observe(PAGE, WIDGET, optional=True)
    assert graph.optionality(PAGE, WIDGET) == OPTIONALITY_MARKED
    graph.declare(PAGE, WIDGET, required=True)  # config says required: evidence cannot undo it
    assert not graph.set_learned_optional(PAGE, WIDGET, True)
    assert graph.edge(PAGE, WIDGET).required  # type: ignore[union-attr]
    assert graph.optionality(ep("a GET /x"), WIDGET) is None


def test_the_trickle_waits_an_interval_then_lets_one_through_per_interval(
    clock: FakeClock,
) -> None:
    gate = TrickleGate(clock, interval=2.0, capacity=2)
    assert not gate.allow(PAGE)  # the hold starts
    clock.advance(1.0)
    assert not gate.allow(PAGE)
    clock.advance(1.0)
    assert gate.allow(PAGE)
    assert not gate.allow(PAGE)
    gate.forget(PAGE)
    assert not gate.allow(PAGE)  # a new hold waits again
    assert gate.passed == 1
    with pytest.raises(ValueError, match="interval must be > 0"):
        TrickleGate(clock, interval=0)


def _learner(clock: FakeClock) -> Learner:
    table = AvailabilityTable("report", DependencyGraph(clock), clock=clock, wall_clock=clock.wall)
    return Learner(
        table,
        RouteTemplates({}),
        TraceTable(clock),
        HopTrust(None),
        wall_clock=clock.wall,
        ledger=SurvivalLedger(clock, OptionalityRules(threshold=3)),
        trickle=TrickleGate(clock, interval=1.0),
    )


def _request(hooks: Learner, clock: FakeClock, answered: int) -> bool:
    """One page request whose settlement call fails; True when it was let through."""
    trace = f"00-{os.urandom(16).hex()}-{'a' * 16}-01"
    inbound = hooks.inbound(
        "GET", "/reports/settlements", {"traceparent": trace}.get, peer_host=None
    )
    if inbound.refusal is not None:
        return False
    out = hooks.outbound("settlement", "GET", "/v1/settlements", {"traceparent": trace}.get)
    hooks.call_failed(out.trace_key, out.callee)
    hooks.inbound_done(inbound.trace_key, 200 <= answered < 400)
    return True


def test_an_endpoint_held_over_a_learned_edge_trickles_until_it_shows_it_survives(
    clock: FakeClock,
) -> None:
    hooks = _learner(clock)
    table = hooks.table
    assert _request(hooks, clock, 200)  # the edge is learned (required); one survival
    table.breaker_opened("settlement", 30.0)  # before more evidence: the page is held
    assert table.check(PAGE) is not None
    assert not _request(hooks, clock, 200)  # refused; the hold starts
    passed = 0
    for _ in range(10):
        clock.advance(1.0)
        passed += _request(hooks, clock, 200)
        if table.check(PAGE) is None:
            break
    assert passed == 2  # two more survivals make three
    assert table.graph.optionality(PAGE, WIDGET) == OPTIONALITY_LEARNED
    assert table.check(PAGE) is None
    assert _request(hooks, clock, 200)  # now every request is served


def test_an_endpoint_that_fails_with_its_dependency_stops_trickling(clock: FakeClock) -> None:
    hooks = _learner(clock)
    for _ in range(3):
        assert _request(hooks, clock, 502)  # the failures that trip a breaker are evidence
    hooks.table.breaker_opened("settlement", 30.0)
    for _ in range(5):
        clock.advance(1.0)
        assert not _request(hooks, clock, 502)
    assert hooks.table.graph.optionality(PAGE, WIDGET) == OPTIONALITY_REQUIRED
    assert hooks.trickle is not None and hooks.trickle.passed == 0


def test_a_failed_call_retried_with_success_is_no_evidence(clock: FakeClock) -> None:
    hooks = _learner(clock)
    for _ in range(5):  # the app retries a failed call and gets its answer: nothing survived
        trace = f"00-{os.urandom(16).hex()}-{'a' * 16}-01"
        get = {"traceparent": trace}.get
        inbound = hooks.inbound("GET", "/reports/settlements", get, peer_host=None)
        first = hooks.outbound("settlement", "GET", "/v1/settlements", get)
        hooks.call_failed(first.trace_key, first.callee)
        again = hooks.outbound("settlement", "GET", "/v1/settlements", get)
        hooks.call_succeeded(again.trace_key, again.callee)
        hooks.inbound_done(inbound.trace_key, True)
    assert hooks.ledger is not None and hooks.ledger.evidence(PAGE, WIDGET) is None
    assert hooks.table.graph.optionality(PAGE, WIDGET) == OPTIONALITY_REQUIRED


def _begin_failed(hooks: Learner) -> str | None:
    """A page request whose settlement call failed and which has not answered yet."""
    trace = f"00-{os.urandom(16).hex()}-{'a' * 16}-01"
    get = {"traceparent": trace}.get
    inbound = hooks.inbound("GET", "/reports/settlements", get, peer_host=None)
    assert inbound.refusal is None
    out = hooks.outbound("settlement", "GET", "/v1/settlements", get)
    hooks.call_failed(out.trace_key, out.callee)
    return inbound.trace_key


def test_a_breaker_that_trips_while_its_failures_await_their_answer_holds_nothing(
    clock: FakeClock,
) -> None:
    # Under load the failures that trip the breaker arrive before the page answers them: the
    # evidence is in flight. Until it lands, the page must not be held (a false refusal).
    hooks = _learner(clock)
    table = hooks.table
    in_flight = [_begin_failed(hooks) for _ in range(3)]
    table.breaker_opened("settlement", 30.0)
    assert table.check(PAGE) is None  # the verdict waits for the answers
    for key in in_flight:
        hooks.inbound_done(key, True)  # the page survived every one
        assert table.check(PAGE) is None
    assert table.graph.optionality(PAGE, WIDGET) == OPTIONALITY_LEARNED


def test_a_page_that_fails_with_its_dependency_is_held_once_its_answers_land(
    clock: FakeClock,
) -> None:
    hooks = _learner(clock)
    table = hooks.table
    in_flight = [_begin_failed(hooks) for _ in range(2)]
    table.breaker_opened("settlement", 30.0)
    assert table.check(PAGE) is None
    hooks.inbound_done(in_flight[0], False)
    assert table.check(PAGE) is None  # one answer still in flight
    updates = hooks.inbound_done(in_flight[1], False)
    assert table.check(PAGE) is not None  # all answered, and failed: the page is held
    assert [u.available for u in updates] == [False]  # and its dependents are told


def test_evidence_that_never_answers_settles_when_its_trace_expires(clock: FakeClock) -> None:
    hooks = _learner(clock)
    table = hooks.table
    _begin_failed(hooks)  # the request never ends (its client vanished, say)
    table.breaker_opened("settlement", 300.0)
    assert table.check(PAGE) is None
    clock.advance(31.0)  # past the trace table's ttl
    updates = hooks.settle()
    assert table.check(PAGE) is not None
    assert [u.available for u in updates] == [False]


def test_a_request_of_an_endpoint_available_again_ends_its_hold(clock: FakeClock) -> None:
    """The request path skips `forget` while nothing is held; once an endpoint is held, a
    request that finds it available ends the hold (its next hold waits a whole interval)."""
    hooks = _learner(clock)
    gate = hooks.trickle
    assert gate is not None
    other = ep("report GET /other")
    gate.allow(other)
    gate.allow(ep("report GET /reports/settlements"))
    assert len(gate.held) == 2
    hooks.inbound("GET", "/reports/settlements", None, peer_host=None)
    assert list(gate.held) == [other]


def test_the_bare_inbound_path_leaves_held_endpoints_and_their_trickle_to_inbound(
    clock: FakeClock,
) -> None:
    hooks = _learner(clock)
    health = ep("report GET /health")
    line = ("GET", "/reports/settlements")
    material = hop_material(*line, None)
    token = hooks.trust.issue("gateway", clock.wall(), material)
    for peer in ("127.0.0.1", "10.0.0.9"):  # no secret: a loopback peer's token only
        expected = hooks.inbound_hop(*line, token, peer_host=peer).from_sidecar
        assert hooks.bare_inbound(PAGE, token, material, peer_host=peer) is expected
        assert expected is (peer == "127.0.0.1")
    assert hooks.bare_inbound(PAGE, None, "", peer_host=None) is False  # no token at all
    assert _request(hooks, clock, 200)  # the edge is learned (required)
    hooks.table.breaker_opened("settlement", 30.0)
    assert not _request(hooks, clock, 200)  # refused; the hold starts
    clock.advance(1.0)
    for endpoint in (PAGE, health):  # something held: `inbound` decides, nothing is taken
        for _ in range(3):
            assert hooks.bare_inbound(endpoint, token, material, peer_host=None) is None
    assert _request(hooks, clock, 200)  # the trickle's turn is still there for `inbound`
