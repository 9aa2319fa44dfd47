"""What carries availability updates between sidecars: one small interface per transport.

The node publishes every update about its own endpoints on each bus and feeds what a bus
receives to `AvailabilityTable.receive` (through the callback the bus was built with). Today:
the peer `Watch` stream (`watch.WatchHub`, with `watch.PeerWatchers` subscribing to others),
Redis pub/sub (`redis_bus.RedisBus`) and core NATS (`nats_bus.NatsBus`, a subject per service).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from cascadebreaker.cascade import AvailabilityUpdate

__all__ = ["Receiver", "UpdateBus"]

Receiver = Callable[["AvailabilityUpdate"], None]
"""Gets each update a bus received from another sidecar."""


class UpdateBus(Protocol):
    """Publishes our updates to other sidecars (receiving is the bus's own business)."""

    def publish(self, updates: Iterable[AvailabilityUpdate]) -> None:
        """Queue updates for every listener; never blocks, never raises."""

    def close(self) -> None:
        """Stop every task and stream of the bus."""
