"""Stateful property test: the machine against a small reference model of the rules."""

from __future__ import annotations

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

THRESHOLD, WAIT, PROBES, NEEDED = 3, 10.0, 2, 2


class Reference:
    """The rules as the issue states them, written plainly."""

    def __init__(self) -> None:
        self.state = "CLOSED"
        self.run = 0
        self.reopen_at = 0.0
        self.granted = 0
        self.ok = 0

    def admit(self, now: float) -> str:
        if self.state == "CLOSED":
            return "admit"
        if self.state == "OPEN":
            if now < self.reopen_at:
                return "reject"
            self.state, self.granted, self.ok = "HALF_OPEN", 0, 0
        if self.granted < PROBES:
            self.granted += 1
            return "probe"
        return "reject"

    def finish(self, now: float, kind: str, failed: bool | None) -> None:
        if kind == "probe":
            if self.state != "HALF_OPEN":
                return
            if failed is None:  # a released probe frees its slot (never below zero)
                self.granted = max(0, self.granted - 1)
            elif failed:
                self.state, self.reopen_at = "OPEN", now + WAIT
            else:
                self.ok += 1
                if self.ok >= NEEDED:
                    self.state, self.run = "CLOSED", 0
            return
        if self.state != "CLOSED" or failed is None:
            return
        self.run = self.run + 1 if failed else 0
        if self.run >= THRESHOLD:
            self.state, self.reopen_at = "OPEN", now + WAIT


class MachineVsReference(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        config = BreakerConfig(
            policies=(ConsecutiveFailures(THRESHOLD),),
            backoff=FixedBackoff(WAIT),
            half_open_max_calls=PROBES,
            success_threshold=NEEDED,
        )
        self.machine = BreakerMachine(config)
        self.model = Reference()
        self.now = 0.0
        self.in_flight: list[str] = []

    @rule(dt=st.floats(min_value=0.0, max_value=WAIT * 1.5))
    def advance(self, dt: float) -> None:
        self.now += dt

    @rule()
    def start_call(self) -> None:
        admission, _ = self.machine.admit(self.now)
        expected = self.model.admit(self.now)
        assert admission.name.lower() == expected
        if admission is not Admission.REJECT:
            self.in_flight.append(expected)

    @precondition(lambda self: self.in_flight)
    @rule(
        data=st.data(), outcome=st.sampled_from([Outcome.SUCCESS, Outcome.FAILURE, Outcome.IGNORED])
    )
    def finish_call(self, data: st.DataObject, outcome: Outcome) -> None:
        i = data.draw(st.integers(0, len(self.in_flight) - 1))
        kind = self.in_flight.pop(i)
        self.machine.record(self.now, outcome, probe=kind == "probe")
        failed = None if outcome is Outcome.IGNORED else outcome is Outcome.FAILURE
        self.model.finish(self.now, kind, failed)

    @invariant()
    def same_state(self) -> None:
        assert self.machine.state is State(self.model.state)

    @invariant()
    def probe_budget_holds(self) -> None:
        if self.machine.state is State.HALF_OPEN:
            assert self.machine.probes_admitted == self.model.granted <= PROBES


MachineVsReference.TestCase.settings = settings(
    max_examples=150, stateful_step_count=60, deadline=None
)
TestMachineVsReference = MachineVsReference.TestCase
