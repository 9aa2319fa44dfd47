"""External upstreams (payment gateway, courier) whose faults can be switched at runtime."""

from __future__ import annotations

import uuid

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp

from cascadebreaker.demo.services.common import CALLER_HEADER, ServiceContext, service_app
from cascadebreaker.demo.services.faults import FaultSwitch


def create_app(ctx: ServiceContext) -> ASGIApp:
    """An external upstream: answers every business path, unless a fault says otherwise."""
    switch = FaultSwitch(ctx.stats)

    def routes(app: FastAPI) -> None:
        switch.routes(app)

        @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE"])
        async def work(path: str, request: Request) -> JSONResponse:
            # Read the body even though it is unused: answering before a body that arrives in a
            # separate segment has been read makes uvicorn misparse the next keep-alive request.
            await request.body()
            failed = await switch.apply(request.headers.get(CALLER_HEADER))
            if failed is not None:
                return failed
            ctx.stats.incr("ok")
            return JSONResponse({"id": uuid.uuid4().hex, "path": "/" + path}, status_code=201)

    return service_app(ctx, routes)
