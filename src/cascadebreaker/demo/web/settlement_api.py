"""The settlement API the web demo's page calls: a day's settlements, with switchable faults."""

from __future__ import annotations

import datetime
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp

from cascadebreaker.demo.services.common import ServiceContext, service_app
from cascadebreaker.demo.services.faults import FaultSwitch
from cascadebreaker.demo.web import ledger


def create_app(ctx: ServiceContext) -> ASGIApp:
    """`GET /v1/settlements?day=YYYY-MM-DD`, unless a fault (`/_fault`) says otherwise."""
    switch = FaultSwitch(ctx.stats)

    def routes(app: FastAPI) -> None:
        switch.routes(app)

        @app.get("/v1/settlements", response_model=None)
        async def list_settlements(day: str | None = None) -> dict[str, Any] | JSONResponse:
            try:
                when = datetime.date.fromisoformat(day) if day else datetime.date.today()
            except ValueError:
                raise HTTPException(422, f"day must be YYYY-MM-DD, got {day!r}") from None
            failed = await switch.apply()
            if failed is not None:
                return failed
            ctx.stats.incr("ok")
            return {"day": when.isoformat(), "settlements": ledger.settlements(when)}

    return service_app(ctx, routes)
