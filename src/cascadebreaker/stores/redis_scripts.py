"""The Lua side of RedisStore: script loading, argument packing and reply parsing."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.exceptions import RedisError

from ..core.state import Admission, Mode, State

# Errors that mean "Redis is unreachable or unwell"; the store never lets them reach a caller.
REDIS_ERRORS = (RedisError, OSError)

SCRIPT_NAMES = ("admit", "report", "trip", "probe", "control", "read", "seen")


def _source(name: str) -> str:
    lua = resources.files("cascadebreaker.stores").joinpath("lua")
    return lua.joinpath("common.lua").read_text() + "\n" + lua.joinpath(f"{name}.lua").read_text()


def load_sources() -> dict[str, str]:
    """Every script, each with the shared prelude prepended."""
    return {name: _source(name) for name in SCRIPT_NAMES}


@dataclass(frozen=True, slots=True)
class RemoteState:
    """The shared state of one breaker as Redis last reported it."""

    state: State
    mode: Mode
    version: int
    remaining: float  # seconds until an OPEN circuit admits probes
    opens: int
    reason: str
    admission: Admission = Admission.ADMIT
    fails: int | None = None  # shared consecutive-failure count, when the script reports it
    lease_remaining: float = 0.0  # seconds until the half-open probe lease runs out
    fresh: bool = False  # the key did not exist (new breaker, or Redis lost its data)
    ticket: int = 0  # the probe's ticket when admission is PROBE
    probes: int = 0  # half-open probes out, fleet-wide
    detail: str = ""  # the reason for people
    failure: str = ""  # the last failure that counted, 'Type: message'

    @classmethod
    def from_reply(cls, reply: list[Any]) -> RemoteState:
        """Parse a script reply: {admission, state, mode, version, remaining_ms, opens, reason,
        fails, lease_remaining_ms, fresh, ticket, probes, detail, failure}."""
        return cls(
            state=State(_text(reply[1])),
            mode=Mode(_text(reply[2])),
            version=int(reply[3]),
            remaining=int(reply[4]) / 1000.0,
            opens=int(reply[5]),
            reason=_text(reply[6]),
            admission=Admission(int(reply[0])),
            fails=int(reply[7]),
            lease_remaining=int(reply[8]) / 1000.0,
            fresh=bool(int(reply[9])),
            ticket=int(reply[10]),
            probes=int(reply[11]),
            detail=_text(reply[12]),
            failure=_text(reply[13]),
        )

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> RemoteState:
        """Parse a pub/sub state message: {n, s, m, v, r, o, w, d, f}."""
        return cls(
            state=State(message["s"]),
            mode=Mode(message["m"]),
            version=int(message["v"]),
            remaining=float(message["r"]) / 1000.0,
            opens=int(message["o"]),
            reason=str(message["w"]),
            detail=str(message.get("d", "")),
            failure=str(message.get("f", "")),
        )


def ms(seconds: float) -> int:
    """Seconds as whole milliseconds (never negative), the unit of the scripts."""
    return max(0, int(seconds * 1000))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
