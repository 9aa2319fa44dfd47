"""The dependency graph: learning, optional edges, aging, transitive dependents."""

from __future__ import annotations

import pytest

from cascadebreaker.cascade import DependencyGraph, Edge, EdgeSource

from .helpers import FakeClock, ep

A, B, C, D = ep("a GET /a"), ep("b GET /b"), ep("c GET /c"), ep("d GET /d")


def test_observe_reports_only_new_edges(clock: FakeClock) -> None:
    graph = DependencyGraph(clock)
    assert graph.observe(A, B)
    assert not graph.observe(A, B)
    assert graph.edge(A, B) == Edge(A, B, required=True)
    assert graph.source(A, B) is EdgeSource.HEADER
    assert len(graph) == 1


def test_per_call_optional_marks_the_edge(clock: FakeClock) -> None:
    graph = DependencyGraph(clock)
    graph.observe(A, B)
    assert graph.observe(A, B, optional=True)
    assert graph.dependencies(A) == []
    assert graph.dependencies(A, required_only=False) == [B]
    # The latest observation decides for learned edges.
    assert graph.observe(A, B)
    assert graph.dependencies(A) == [B]


def test_config_optional_sticks(clock: FakeClock) -> None:
    graph = DependencyGraph(clock)
    graph.observe(A, B)
    assert graph.mark_optional(A, B)
    assert not graph.observe(A, B)  # a plain call cannot make it required again
    assert graph.edge(A, B) == Edge(A, B, required=False)
    graph.declare(A, C, required=False)
    graph.observe(A, C)
    assert graph.dependencies(A) == []


def test_mark_optional_before_any_call_declares_the_edge(clock: FakeClock) -> None:
    graph = DependencyGraph(clock)
    assert graph.mark_optional(A, B)
    assert graph.edge(A, B) == Edge(A, B, required=False)
    assert graph.source(A, B) is EdgeSource.CONFIG


def test_unseen_learned_edges_age_out_but_config_edges_stay(clock: FakeClock) -> None:
    graph = DependencyGraph(clock, edge_ttl=60.0)
    graph.observe(A, B, source=EdgeSource.TRACE)
    graph.load([Edge(B, C)])
    clock.advance(30)
    graph.observe(A, D)
    clock.advance(31)
    assert graph.expire() == [Edge(A, B)]
    assert {(e.caller, e.callee) for e in graph.edges()} == {(A, D), (B, C)}
    clock.advance(60)
    assert graph.expire() == [Edge(A, D)]
    assert list(graph.edges()) == [Edge(B, C)]
    assert graph.callees_of_service("d") == set()
    assert graph.endpoints() == {B, C}


def test_seen_edges_do_not_age(clock: FakeClock) -> None:
    graph = DependencyGraph(clock, edge_ttl=60.0)
    for _ in range(5):
        graph.observe(A, B)
        clock.advance(50)
    assert graph.expire() == []


def test_dependents_are_transitive_and_survive_cycles(clock: FakeClock) -> None:
    graph = DependencyGraph(clock)
    graph.observe(A, B)
    graph.observe(B, C)
    graph.observe(C, D)
    graph.observe(D, B)  # cycle B -> C -> D -> B
    assert graph.dependents(D) == {A, B, C}
    assert graph.dependents(A) == set()
    assert graph.dependencies(B) == [C]
    assert graph.callers(B) == [A, D]


def test_optional_edges_do_not_make_dependents(clock: FakeClock) -> None:
    graph = DependencyGraph(clock)
    graph.observe(A, B, optional=True)
    graph.observe(B, C)
    assert graph.dependents(C) == {B}
    assert graph.dependents(C, required_only=False) == {A, B}


def test_callees_of_service(clock: FakeClock) -> None:
    graph = DependencyGraph(clock)
    other = ep("b POST /other")
    graph.observe(A, B)
    graph.observe(C, other)
    assert graph.callees_of_service("b") == {B, other}


def test_edge_count_is_capped(clock: FakeClock) -> None:
    graph = DependencyGraph(clock, max_edges=2)
    assert graph.observe(A, B)
    assert graph.observe(A, C)
    assert not graph.observe(A, D)
    assert graph.dropped == 1
    assert len(graph) == 2


def test_bad_parameters_are_refused(clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="edge_ttl"):
        DependencyGraph(clock, edge_ttl=0)
