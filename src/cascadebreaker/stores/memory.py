"""MemoryStore: breaker state in this process (the default)."""

from __future__ import annotations

import threading

from ..core.config import BreakerConfig
from .base import BreakerSlot, Clock, log


class MemoryStore:
    """Keeps each breaker's state in process memory; breakers sharing a store and a name share
    state. Safe under threads and asyncio: the lock is held only around state updates."""

    def __init__(self) -> None:
        self._slots: dict[str, BreakerSlot] = {}
        self._lock = threading.Lock()

    def slot(self, name: str, config: BreakerConfig, clock: Clock) -> BreakerSlot:
        """Return the slot for `name`, creating it with `config` on first use."""
        with self._lock:
            existing = self._slots.get(name)
            if existing is None:
                existing = self._slots[name] = BreakerSlot(name, config, clock)
            elif existing.config != config:
                log.warning(
                    "breaker %r already exists in this store; keeping its first settings", name
                )
            return existing

    def names(self) -> list[str]:
        """Names of the breakers held."""
        with self._lock:
            return sorted(self._slots)

    def close(self) -> None:
        """Nothing to release."""
