"""The saga's participants: inventory, payment and shipping."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.types import ASGIApp

from cascadebreaker.demo.services.common import DownstreamError, ServiceContext, service_app
from cascadebreaker.demo.services.responses import downstream_failure


class ReservationIn(BaseModel):
    """Reserve `quantity` of `item` for an order."""

    order_id: str
    item: str = "widget"
    quantity: int = 1


class ChargeIn(BaseModel):
    """Charge `amount` for an order."""

    order_id: str
    amount: float = 10.0


class RefundIn(BaseModel):
    """Refund a charge (a compensation)."""

    charge_id: str


class ShipmentIn(BaseModel):
    """Ship an order."""

    order_id: str
    address: str = "1 Loopback Lane"


def create_inventory_app(ctx: ServiceContext) -> ASGIApp:
    """Inventory: reservations made and released (the saga's first step and last compensation)."""
    reservations: dict[str, ReservationIn] = {}

    def routes(app: FastAPI) -> None:
        @app.post("/v1/reservations", status_code=201)
        async def reserve(body: ReservationIn) -> dict[str, Any]:
            reservation_id = uuid.uuid4().hex
            reservations[reservation_id] = body
            ctx.stats.incr("reservations_made")
            ctx.stats.incr("reservations_active")
            return {"id": reservation_id, "order_id": body.order_id}

        @app.delete("/v1/reservations/{reservation_id}", response_model=None)
        async def release(reservation_id: str) -> dict[str, Any] | JSONResponse:
            if reservations.pop(reservation_id, None) is None:
                return JSONResponse({"error": "unknown reservation"}, status_code=404)
            ctx.stats.incr("reservations_released")
            ctx.stats.incr("reservations_active", -1)
            return {"id": reservation_id, "released": True}

    return service_app(ctx, routes)


def create_payment_app(ctx: ServiceContext) -> ASGIApp:
    """Payment: charges through the external payment gateway; refunds are a local reversal."""
    charges: dict[str, ChargeIn] = {}

    def routes(app: FastAPI) -> None:
        @app.post("/v1/charges", status_code=201, response_model=None)
        async def charge(body: ChargeIn) -> dict[str, Any] | JSONResponse:
            try:
                await ctx.downstream("payment-gateway").call_ok(
                    "POST", "/v1/charges", {"amount": body.amount}
                )
            except DownstreamError as exc:
                ctx.stats.incr("charges_failed")
                return downstream_failure(exc)
            charge_id = uuid.uuid4().hex
            charges[charge_id] = body
            ctx.stats.incr("charges")
            return {"id": charge_id, "order_id": body.order_id}

        @app.post("/v1/refunds", status_code=201, response_model=None)
        async def refund(body: RefundIn) -> dict[str, Any] | JSONResponse:
            if charges.pop(body.charge_id, None) is None:
                return JSONResponse({"error": "unknown charge"}, status_code=404)
            ctx.stats.incr("refunds")
            return {"charge_id": body.charge_id, "refunded": True}

    return service_app(ctx, routes)


def create_shipping_app(ctx: ServiceContext) -> ASGIApp:
    """Shipping: shipments booked with the external courier."""

    def routes(app: FastAPI) -> None:
        @app.post("/v1/shipments", status_code=201, response_model=None)
        async def ship(body: ShipmentIn) -> dict[str, Any] | JSONResponse:
            try:
                await ctx.downstream("courier").call_ok(
                    "POST", "/v1/shipments", {"address": body.address}
                )
            except DownstreamError as exc:
                ctx.stats.incr("shipments_failed")
                return downstream_failure(exc)
            ctx.stats.incr("shipments")
            return {"id": uuid.uuid4().hex, "order_id": body.order_id}

    return service_app(ctx, routes)
