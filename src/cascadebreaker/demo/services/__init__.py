"""The demo's services: each module builds one FastAPI app from a ServiceContext."""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import ASGIApp

from cascadebreaker.demo.services import backends, external, gateway, order
from cascadebreaker.demo.services.common import ServiceContext
from cascadebreaker.demo.web import settlement_api

AppFactory = Callable[[ServiceContext], ASGIApp]

# Service name -> the factory of its app.
APP_FACTORIES: dict[str, AppFactory] = {
    "gateway": gateway.create_app,
    "order": order.create_app,
    "inventory": backends.create_inventory_app,
    "payment": backends.create_payment_app,
    "shipping": backends.create_shipping_app,
    "payment-gateway": external.create_app,
    "courier": external.create_app,
    "recommendations": external.create_app,
    "settlement-api": settlement_api.create_app,
}


def create_app(ctx: ServiceContext) -> ASGIApp:
    """Build the app of the service `ctx.name` (a replica runs its service's app)."""
    return APP_FACTORIES[ctx.topology.service(ctx.name).service](ctx)
