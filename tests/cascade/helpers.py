"""Helpers for the pure cascade tests: a hand-driven clock and a small in-memory mesh."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from cascadebreaker.cascade import (
    AvailabilityTable,
    AvailabilityUpdate,
    DependencyGraph,
    Endpoint,
    Verdict,
)

WALL_EPOCH = 1_764_000_000.0


class FakeClock:
    """Monotonic and wall clocks that move only when a test advances them."""

    def __init__(self) -> None:
        self.mono = 1000.0
        self.wall_offset = WALL_EPOCH - self.mono

    def __call__(self) -> float:
        return self.mono

    def wall(self) -> float:
        """Wall-clock seconds, moving with the monotonic clock."""
        return self.mono + self.wall_offset

    def advance(self, seconds: float) -> None:
        """Move both clocks forward."""
        self.mono += seconds


def ep(text: str) -> Endpoint:
    """Shorthand: `ep("a GET /x")`."""
    return Endpoint.parse(text)


@dataclass
class Mesh:
    """One AvailabilityTable per service; every update is delivered to every other table, as
    Redis pub/sub would, until nothing more is sent."""

    clock: FakeClock
    secret: bytes | None = None
    tables: dict[str, AvailabilityTable] = field(default_factory=dict)
    delivered: list[AvailabilityUpdate] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)

    def table(self, service: str) -> AvailabilityTable:
        """The table of `service`, created on first use."""
        if service not in self.tables:
            self.tables[service] = AvailabilityTable(
                service,
                DependencyGraph(self.clock),
                clock=self.clock,
                wall_clock=self.clock.wall,
                secret=self.secret,
            )
        return self.tables[service]

    def edge(self, caller: str, callee: str, *, optional: bool = False) -> None:
        """The caller's sidecar learns `caller -> callee` from one call."""
        c = ep(caller)
        self.flood(self.table(c.service).learn(c, ep(callee), optional=optional))

    def flood(self, updates: Iterable[AvailabilityUpdate]) -> int:
        """Deliver updates to every other table until quiet; return how many were delivered."""
        queue = list(updates)
        count = 0
        while queue:
            update = queue.pop(0)
            assert count < 10_000, "propagation did not terminate"
            for name, table in self.tables.items():
                if name == update.service:
                    continue
                count += 1
                self.delivered.append(update)
                result = table.receive(update)
                self.verdicts.append(result.verdict)
                queue.extend(result.updates)
        return count

    def available(self, endpoint: str) -> bool:
        """Availability of an endpoint as its own service's table sees it."""
        e = ep(endpoint)
        return self.table(e.service).is_available(e)
