"""The gateway: the public entry (POST /orders), passing orders to the order service."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.types import ASGIApp

from cascadebreaker.demo.services.common import DownstreamError, ServiceContext, service_app
from cascadebreaker.demo.services.responses import downstream_failure


class PublicOrder(BaseModel):
    """An order as a client submits it."""

    item: str = "widget"
    quantity: int = 1
    amount: float = 10.0


def create_app(ctx: ServiceContext) -> ASGIApp:
    """The gateway's app."""

    def routes(app: FastAPI) -> None:
        @app.post("/orders", status_code=201)
        async def place_order(body: PublicOrder) -> JSONResponse:
            try:
                # The gateway starts each trace itself, so its sidecar never saw one inbound:
                # it names its endpoint instead, and the cascade reaches the public entry.
                response = await ctx.downstream("order").call(
                    "POST", "/v1/orders", body.model_dump(), serving="gateway POST /orders"
                )
            except DownstreamError as exc:
                ctx.stats.incr("orders_refused" if exc.refused else "orders_error")
                return downstream_failure(exc)
            outcome: dict[str, Any] = response.json()
            ctx.stats.incr("orders_ok" if response.status_code == 201 else "orders_failed")
            return JSONResponse(outcome, status_code=response.status_code)

    return service_app(ctx, routes)
