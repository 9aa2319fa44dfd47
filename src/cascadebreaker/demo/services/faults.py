"""A switchable fault for the demo's external upstreams: `/_fault` to set it, `apply()` to obey it.

`ccb fault inject SERVICE --mode down|slow|errors` and `ccb fault clear` talk to these routes.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import asdict, dataclass
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from cascadebreaker.demo.services.common import Stats

FaultMode = Literal["down", "slow", "errors"]


class FaultIn(BaseModel):
    """`POST /_fault` body: which fault, for what share of requests, and how slow."""

    mode: FaultMode
    rate: float | None = Field(default=None, ge=0.0, le=1.0)
    delay: float = Field(default=2.0, ge=0.0)
    # Only calls from this replica (`shipping.3`): its route to us is broken, not we.
    caller: str | None = Field(default=None, min_length=1, max_length=100)


@dataclass
class Fault:
    """The active fault of an external upstream."""

    mode: FaultMode
    rate: float
    delay: float
    caller: str | None = None


class FaultSwitch:
    """The fault an upstream is told to have, and the routes that switch it."""

    def __init__(self, stats: Stats) -> None:
        self.stats = stats
        self.fault: Fault | None = None
        self._rng = random.Random()

    def routes(self, app: FastAPI) -> None:
        """Add GET/POST/DELETE /_fault to `app`."""

        @app.get("/_fault")
        async def get_fault() -> dict[str, Any]:
            return {"fault": asdict(self.fault) if self.fault else None}

        @app.post("/_fault")
        async def set_fault(body: FaultIn) -> dict[str, Any]:
            # errors default to half the requests; down and slow to all of them
            rate = body.rate if body.rate is not None else (0.5 if body.mode == "errors" else 1.0)
            self.fault = Fault(body.mode, rate, body.delay, body.caller)
            self.stats.incr("faults_injected")
            return {"fault": asdict(self.fault)}

        @app.delete("/_fault")
        async def clear_fault() -> dict[str, Any]:
            self.fault = None
            return {"fault": None}

    async def apply(self, caller: str | None = None) -> JSONResponse | None:
        """Obey the fault for one request (from replica `caller`): an error response to send,
        or None to do the work."""
        fault = self.fault
        if fault is None or (fault.caller is not None and fault.caller != caller):
            return None
        if self._rng.random() >= fault.rate:
            return None
        self.stats.incr("faulted")
        if fault.mode == "down":
            return JSONResponse({"error": "unavailable"}, status_code=503)
        if fault.mode == "errors":
            return JSONResponse({"error": "internal error"}, status_code=500)
        await asyncio.sleep(fault.delay)
        return None
