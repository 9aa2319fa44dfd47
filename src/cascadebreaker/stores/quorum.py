"""FleetQuorum: when a breaker shared through Redis may open for the whole fleet.

Without a quorum (the default) any one process's trip opens the shared circuit for every
process: right when the upstream is down, wrong when one replica alone has a local fault (a bad
route, a full connection pool, a noisy neighbour), because then that one replica takes the
upstream away from the whole fleet. With a quorum, a process's own trip is a *vote*: the shared
circuit opens only when enough distinct instances voted in the same closed round within the
window; until then the voting process's circuit is open for itself alone (scope `local`), and it
probes and recovers on its own. The fleet-wide consecutive-failure count obeys the same quorum:
it opens the shared circuit only when the failures in the run came from enough instances.
"""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FleetQuorum:
    """Open the shared circuit only when at least `reporters` distinct instances (and at least
    `fraction` of the instances active in the last `window` seconds) report failures."""

    reporters: int = 2
    fraction: float = 0.0
    window: float = 30.0

    def __post_init__(self) -> None:
        r = self.reporters
        if isinstance(r, bool) or not isinstance(r, int) or r < 1:
            raise ValueError(f"quorum.reporters must be an integer >= 1, got {r!r}")
        f = self.fraction
        if isinstance(f, bool) or not isinstance(f, int | float) or not 0.0 <= f <= 1.0:
            raise ValueError(f"quorum.fraction must be in [0, 1], got {f!r}")
        w = self.window
        if isinstance(w, bool) or not isinstance(w, int | float) or not w > 0:
            raise ValueError(f"quorum.window must be a number > 0, got {w!r}")

    def script_args(self, instance: str) -> tuple[str, int, float, int]:
        """The Lua arguments: instance id, reporters, fraction, window in ms."""
        return instance, self.reporters, self.fraction, int(self.window * 1000)


NO_QUORUM_ARGS: tuple[str, int, float, int] = ("", 0, 0.0, 0)


def default_instance() -> str:
    """An id for this process: host, pid and a random suffix (pids are reused after restarts)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
