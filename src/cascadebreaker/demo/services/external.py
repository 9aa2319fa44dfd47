"""External upstreams (payment gateway, courier) whose faults can be switched at runtime."""

from __future__ import annotations

import asyncio
import random
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.types import ASGIApp

from cascadebreaker.demo.services.common import ServiceContext, service_app

FaultMode = Literal["down", "slow", "errors"]


class FaultIn(BaseModel):
    """`POST /_fault` body: which fault, for what share of requests, and how slow."""

    mode: FaultMode
    rate: float | None = Field(default=None, ge=0.0, le=1.0)
    delay: float = Field(default=2.0, ge=0.0)


@dataclass
class Fault:
    """The active fault of an external upstream."""

    mode: FaultMode
    rate: float
    delay: float


def create_app(ctx: ServiceContext) -> ASGIApp:
    """An external upstream: answers every business path, unless a fault says otherwise."""
    state: dict[str, Fault | None] = {"fault": None}
    rng = random.Random()

    def routes(app: FastAPI) -> None:
        @app.get("/_fault")
        async def get_fault() -> dict[str, Any]:
            fault = state["fault"]
            return {"fault": asdict(fault) if fault else None}

        @app.post("/_fault")
        async def set_fault(body: FaultIn) -> dict[str, Any]:
            # errors default to half the requests; down and slow to all of them
            rate = body.rate if body.rate is not None else (0.5 if body.mode == "errors" else 1.0)
            fault = Fault(body.mode, rate, body.delay)
            state["fault"] = fault
            ctx.stats.incr("faults_injected")
            return {"fault": asdict(fault)}

        @app.delete("/_fault")
        async def clear_fault() -> dict[str, Any]:
            state["fault"] = None
            return {"fault": None}

        @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE"])
        async def work(path: str, request: Request) -> JSONResponse:
            # Read the body even though it is unused: answering before a body that arrives in a
            # separate segment has been read makes uvicorn misparse the next keep-alive request.
            await request.body()
            fault = state["fault"]
            if fault is not None and rng.random() < fault.rate:
                ctx.stats.incr("faulted")
                if fault.mode == "down":
                    return JSONResponse({"error": "unavailable"}, status_code=503)
                if fault.mode == "errors":
                    return JSONResponse({"error": "internal error"}, status_code=500)
                await asyncio.sleep(fault.delay)
            ctx.stats.incr("ok")
            return JSONResponse({"id": uuid.uuid4().hex, "path": "/" + path}, status_code=201)

    return service_app(ctx, routes)
