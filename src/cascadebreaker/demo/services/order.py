"""The order service: a saga orchestrator (reserve → charge → ship; compensate in reverse)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.types import ASGIApp
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_incrementing

from cascadebreaker.demo.services.common import DownstreamError, ServiceContext, service_app
from cascadebreaker.demo.topology import COMPENSATION_ATTEMPTS, COMPENSATION_PROBE_WAIT
from cascadebreaker.integrations.tenacity import retry_when_probe_due, wait_for_probe

# The endpoint the pre-check asks about: this service's own saga entry.
ORDER_ENDPOINT = "POST /v1/orders"


class OrderIn(BaseModel):
    """An order as the gateway passes it on."""

    item: str = "widget"
    quantity: int = 1
    amount: float = 10.0


@dataclass
class SagaRun:
    """What one saga did: the steps that completed and the compensations they need."""

    order_id: str
    done: list[str] = field(default_factory=list)
    # Compensations of completed steps, pushed in step order, run in reverse.
    undo: list[tuple[str, Callable[[], Awaitable[Any]]]] = field(default_factory=list)
    compensations: int = 0
    compensation_failures: int = 0


class OrderSaga:
    """Runs the order saga against the service's downstreams and counts what it did."""

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx

    async def run(self, order: OrderIn) -> JSONResponse:
        """Run one saga; 201 on success, 409 after compensating, 503 when refused up front."""
        stats = self.ctx.stats
        verdict = await self.ctx.precheck.check(ORDER_ENDPOINT)
        if not verdict.available:
            stats.incr("sagas_refused")
            return JSONResponse(
                {"status": "refused", "upstream": "order", "cause": list(verdict.cause)},
                status_code=503,
            )
        stats.incr("sagas_started")
        run = SagaRun(uuid.uuid4().hex)
        try:
            result = await self._steps(order, run)
        except DownstreamError as exc:
            await self._compensate(run)
            stats.incr("sagas_failed")
            stats.incr("compensations", run.compensations)
            stats.incr("compensation_failures", run.compensation_failures)
            return JSONResponse(
                {
                    "status": "failed",
                    "order_id": run.order_id,
                    "failed_step": exc.upstream,
                    "refused": exc.refused,
                    "detail": exc.detail,
                    "steps_done": run.done,
                    "compensations": run.compensations,
                },
                status_code=409,  # the saga ended cleanly: a business outcome, not a server fault
            )
        stats.incr("sagas_succeeded")
        return JSONResponse({"status": "created", **result}, status_code=201)

    async def _steps(self, order: OrderIn, run: SagaRun) -> dict[str, Any]:
        inventory = self.ctx.downstream("inventory")
        payment = self.ctx.downstream("payment")
        shipping = self.ctx.downstream("shipping")

        reservation = (
            await inventory.call_ok(
                "POST",
                "/v1/reservations",
                {"order_id": run.order_id, "item": order.item, "quantity": order.quantity},
            )
        ).json()
        run.done.append("inventory")
        run.undo.append(
            (
                "release",
                lambda: inventory.call_ok("DELETE", f"/v1/reservations/{reservation['id']}"),
            )
        )

        charge = (
            await payment.call_ok(
                "POST", "/v1/charges", {"order_id": run.order_id, "amount": order.amount}
            )
        ).json()
        run.done.append("payment")
        run.undo.append(
            ("refund", lambda: payment.call_ok("POST", "/v1/refunds", {"charge_id": charge["id"]}))
        )

        shipment = (
            await shipping.call_ok("POST", "/v1/shipments", {"order_id": run.order_id})
        ).json()
        run.done.append("shipping")
        return {
            "order_id": run.order_id,
            "reservation": reservation["id"],
            "charge": charge["id"],
            "shipment": shipment["id"],
            "recommendations": await self._recommendations(run),
        }

    async def _recommendations(self, run: SagaRun) -> str | None:
        """A soft dependency: without it the order is still placed, with no suggestions. The
        call carries no `ccb-optional` header: the cascade learns that orders survive it."""
        try:
            response = await self.ctx.downstream("recommendations").call_ok(
                "GET", f"/v1/recommendations?order={run.order_id}"
            )
        except DownstreamError:
            self.ctx.stats.incr("recommendations_fallback")
            return None
        suggestion: str = response.json()["id"]
        return suggestion

    async def _compensate(self, run: SagaRun) -> None:
        for name, undo in reversed(run.undo):
            try:
                await self._undo_with_retries(undo)
            except DownstreamError:
                run.compensation_failures += 1
                continue
            run.compensations += 1
            self.ctx.stats.incr(f"compensations.{name}")

    @staticmethod
    async def _undo_with_retries(undo: Callable[[], Awaitable[Any]]) -> None:
        # Retry outside, breaker inside (each attempt asks the downstream's breaker): a failed
        # compensation is tried again after a short pause; one the breaker refused only when
        # its probe is due soon, and then exactly at the probe, never into the open circuit.
        retrying = AsyncRetrying(
            retry=retry_when_probe_due(
                COMPENSATION_PROBE_WAIT, retry_if_exception_type(DownstreamError)
            ),
            wait=wait_for_probe(wait_incrementing(start=0.05, increment=0.05)),
            stop=stop_after_attempt(COMPENSATION_ATTEMPTS),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                await undo()


def create_app(ctx: ServiceContext) -> ASGIApp:
    """The order service's app."""
    saga = OrderSaga(ctx)

    def routes(app: FastAPI) -> None:
        @app.post("/v1/orders", status_code=201)
        async def create_order(body: OrderIn) -> JSONResponse:
            return await saga.run(body)

    return service_app(ctx, routes)
