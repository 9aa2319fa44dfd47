"""Stateful check of AvailabilityTable against a tiny reference model.

The model is a graph plus the set of live unavailable dependencies (breaker roots and received
updates, each with a deadline): one of our endpoints is unavailable exactly when a path of
required edges leads from it to a live unavailable dependency. The updates the table emits are
applied to a receiver's view, which must always agree with the table.
"""

from __future__ import annotations

from itertools import pairwise

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from cascadebreaker.cascade import (
    AvailabilityTable,
    AvailabilityUpdate,
    Cause,
    DependencyGraph,
    Endpoint,
    Verdict,
)

from .helpers import FakeClock

OWN = [Endpoint("s", "GET", f"/{i}") for i in range(4)]
EXT = [Endpoint("x", "GET", f"/{i}") for i in range(4)]
ALL = OWN + EXT

own_index = st.integers(0, len(OWN) - 1)
ext_index = st.integers(0, len(EXT) - 1)
ttl = st.integers(1, 40).map(float)


class AvailabilityModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.table = AvailabilityTable(
            "s",
            DependencyGraph(self.clock, edge_ttl=10_000.0),
            clock=self.clock,
            wall_clock=self.clock.wall,
        )
        self.edges: dict[tuple[Endpoint, Endpoint], bool] = {}  # -> required
        self.roots: dict[Endpoint, float] = {}  # deadline
        self.remote: dict[Endpoint, float] = {}
        self.version = 0
        self.view: dict[Endpoint, AvailabilityUpdate] = {}

    # -- the reference model --------------------------------------------------------------

    def dependency_down(self, e: Endpoint) -> bool:
        now = self.clock()
        return self.roots.get(e, 0.0) > now or self.remote.get(e, 0.0) > now

    def model_unavailable(self, start: Endpoint) -> bool:
        seen = {start}
        stack = [start]
        while stack:
            node = stack.pop()
            for (caller, callee), required in self.edges.items():
                if caller != node or not required:
                    continue
                if callee.service != "s" and self.dependency_down(callee):
                    return True
                if callee.service == "s" and callee not in seen:
                    seen.add(callee)
                    stack.append(callee)
        return False

    def absorb(self, updates: tuple[AvailabilityUpdate, ...]) -> None:
        for u in updates:
            previous = self.view.get(u.endpoint)
            assert previous is None or u.version > previous.version
            self.view[u.endpoint] = u

    # -- rules ----------------------------------------------------------------------------

    @rule(caller=own_index, callee=st.integers(0, len(ALL) - 1), optional=st.booleans())
    def learn(self, caller: int, callee: int, optional: bool) -> None:
        self.edges[(OWN[caller], ALL[callee])] = not optional
        self.absorb(self.table.learn(OWN[caller], ALL[callee], optional=optional))

    @rule(dep=ext_index, seconds=ttl)
    def breaker_opens(self, dep: int, seconds: float) -> None:
        self.roots[EXT[dep]] = self.clock() + seconds
        self.absorb(self.table.breaker_opened(EXT[dep], seconds))

    @rule(dep=ext_index)
    def breaker_recovers(self, dep: int) -> None:
        self.roots.pop(EXT[dep], None)
        self.absorb(self.table.breaker_recovered(EXT[dep]))

    @rule(dep=ext_index, seconds=ttl)
    def receive_unavailable(self, dep: int, seconds: float) -> None:
        self.version += 1
        e = EXT[dep]
        update = AvailabilityUpdate(
            "x", e, False, (Cause(e, "remote"),), self.clock.wall() + seconds, self.version
        )
        result = self.table.receive(update)
        assert result.verdict is Verdict.ACCEPTED
        self.remote[e] = self.clock() + seconds
        self.absorb(result.updates)

    @rule(dep=ext_index)
    def receive_available(self, dep: int) -> None:
        self.version += 1
        e = EXT[dep]
        update = AvailabilityUpdate("x", e, True, (), self.clock.wall() + 60, self.version)
        result = self.table.receive(update)
        assert result.verdict is Verdict.ACCEPTED
        self.remote.pop(e, None)
        self.absorb(result.updates)

    @rule(seconds=st.integers(1, 15).map(float))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule()
    def housekeeping(self) -> None:
        before = {e: self.table.is_available(e) for e in ALL}
        self.table.expire()
        assert before == {e: self.table.is_available(e) for e in ALL}

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def dependencies_match(self) -> None:
        for e in EXT:
            assert self.table.is_available(e) == (not self.dependency_down(e)), e

    @invariant()
    def own_endpoints_match(self) -> None:
        for e in OWN:
            assert self.table.is_available(e) == (not self.model_unavailable(e)), e

    @invariant()
    def cause_chains_are_real_paths(self) -> None:
        for e in OWN:
            u = self.table.check(e)
            if u is None:
                continue
            links = [c.endpoint for c in u.cause_chain]
            assert links[-1] == e
            assert len(set(links)) == len(links)
            assert links[0].service == "x"
            assert self.dependency_down(links[0])
            for callee, caller in pairwise(links):
                assert self.edges.get((caller, callee)) is True

    @invariant()
    def receivers_agree(self) -> None:
        wall = self.clock.wall()
        for e in OWN:
            u = self.view.get(e)
            receiver_down = u is not None and not u.available and u.expires_at > wall
            assert receiver_down == (not self.table.is_available(e)), e


TestAvailabilityModel = AvailabilityModel.TestCase
TestAvailabilityModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
