"""Stateful property test: the machine against a small reference model of the rules.

Calls are admitted and finished in any order, so permits of earlier rounds (calls that started
before a trip, probes of an earlier half-open round, probes whose lease ran out) are part of the
vocabulary. The model keeps rounds and tickets the plain way; the machine must agree with it on
every admission and every state, and never hand out more probes than the budget.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from cascadebreaker.core import (
    Admission,
    BreakerConfig,
    BreakerMachine,
    ConsecutiveFailures,
    FixedBackoff,
    Outcome,
    State,
)

THRESHOLD, WAIT, PROBES, NEEDED, LEASE = 3, 10.0, 2, 2, 25.0


@dataclass
class Call:
    kind: str  # "admit" or "probe"
    round: int  # the machine's round at admission
    ticket: int
    model_round: int


class Reference:
    """The rules as the issue states them, written plainly."""

    def __init__(self, window_rate: float | None) -> None:
        self.window_rate = window_rate
        self.state = "CLOSED"
        self.round = 0
        self.run = 0
        self.reopen_at = 0.0
        self.granted = self.issued = self.reclaimed = 0
        self.ok = self.bad = self.seen = 0
        self.lease_until = 0.0

    def move(self, to: str, now: float) -> None:
        self.state, self.round = to, self.round + 1
        if to == "OPEN":
            self.reopen_at = now + WAIT
        self.granted = self.issued = self.reclaimed = self.ok = self.bad = self.seen = 0
        self.run = 0

    def admit(self, now: float) -> tuple[str, int]:
        if self.state == "CLOSED":
            return "admit", 0
        if self.state == "OPEN":
            if now < self.reopen_at:
                return "reject", 0
            self.move("HALF_OPEN", now)
        if self.granted >= PROBES and now >= self.lease_until:
            self.granted, self.reclaimed = 0, self.issued  # lost probes: slots taken back
        if self.granted < PROBES:
            self.granted += 1
            self.issued += 1
            self.lease_until = now + LEASE
            return "probe", self.issued
        return "reject", 0

    def finish(self, now: float, call: Call, failed: bool | None) -> None:
        if call.model_round != self.round:
            return  # another round's call: stale
        if call.kind == "probe":
            self.settle_probe(now, call.ticket, failed)
            return
        if self.state != "CLOSED" or failed is None:
            return
        self.run = self.run + 1 if failed else 0
        if self.run >= THRESHOLD:
            self.move("OPEN", now)

    def settle_probe(self, now: float, ticket: int, failed: bool | None) -> None:
        if failed is None:  # a released probe frees its slot, unless the lease took it back
            if ticket > self.reclaimed:
                self.granted = max(0, self.granted - 1)
            return
        self.seen += 1
        self.bad += failed
        if self.window_rate is None:
            if failed:
                self.move("OPEN", now)
                return
            self.ok += 1
            if self.ok >= NEEDED:
                self.move("CLOSED", now)
            return
        left = max(0, PROBES - self.seen)
        if self.bad >= self.window_rate * PROBES:
            self.move("OPEN", now)
        elif self.bad + left < self.window_rate * PROBES:
            self.move("CLOSED", now)


class MachineVsReference(RuleBasedStateMachine):
    window_rate: float | None = None

    def __init__(self) -> None:
        super().__init__()
        config = BreakerConfig(
            policies=(ConsecutiveFailures(THRESHOLD),),
            backoff=FixedBackoff(WAIT),
            half_open_max_calls=PROBES,
            success_threshold=NEEDED,
            probe_timeout=LEASE,
            half_open_failure_rate=self.window_rate,
        )
        self.machine = BreakerMachine(config)
        self.model = Reference(self.window_rate)
        self.now = 0.0
        self.in_flight: list[Call] = []

    @rule(dt=st.floats(min_value=0.0, max_value=LEASE * 1.2))
    def advance(self, dt: float) -> None:
        self.now += dt

    @rule()
    def start_call(self) -> None:
        admission, _ = self.machine.admit(self.now)
        expected, ticket = self.model.admit(self.now)
        assert admission.name.lower() == expected
        if admission is not Admission.REJECT:
            issued = self.machine.probes.issued if admission is Admission.PROBE else 0
            assert issued == ticket
            call = Call(expected, self.machine.round, ticket, self.model.round)
            self.in_flight.append(call)

    @precondition(lambda self: self.in_flight)
    @rule(
        data=st.data(), outcome=st.sampled_from([Outcome.SUCCESS, Outcome.FAILURE, Outcome.IGNORED])
    )
    def finish_call(self, data: st.DataObject, outcome: Outcome) -> None:
        # Any call may finish next: one from before a trip, a probe of an earlier round, a probe
        # whose slot the lease took back.
        call = self.in_flight.pop(data.draw(st.integers(0, len(self.in_flight) - 1)))
        self.machine.record(
            self.now, outcome, call.kind == "probe", 0.0, admitted_in=call.round, ticket=call.ticket
        )
        failed = None if outcome is Outcome.IGNORED else outcome is Outcome.FAILURE
        self.model.finish(self.now, call, failed)

    @invariant()
    def same_state(self) -> None:
        assert self.machine.state is State(self.model.state)

    @invariant()
    def rounds_move_together(self) -> None:
        current = [c for c in self.in_flight if c.model_round == self.model.round]
        assert all(c.round == self.machine.round for c in current)
        assert all(c.round != self.machine.round for c in self.in_flight if c not in current)

    @invariant()
    def probe_budget_holds(self) -> None:
        if self.machine.state is State.HALF_OPEN:
            assert self.machine.probes.admitted == self.model.granted <= PROBES
            live = [
                c
                for c in self.in_flight
                if c.kind == "probe"
                and c.round == self.machine.round
                and c.ticket > self.model.reclaimed
            ]
            assert len(live) <= PROBES  # never more probes out than the budget


class WindowMachineVsReference(MachineVsReference):
    """Half-open judged by the failure rate of a round of probes."""

    window_rate = 0.5


SETTINGS = settings(max_examples=150, stateful_step_count=60, deadline=None)
MachineVsReference.TestCase.settings = SETTINGS
WindowMachineVsReference.TestCase.settings = SETTINGS
TestMachineVsReference = MachineVsReference.TestCase
TestWindowMachineVsReference = WindowMachineVsReference.TestCase
