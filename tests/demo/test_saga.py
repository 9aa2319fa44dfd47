"""End-to-end saga behaviour on real processes (plain and direct modes)."""

from __future__ import annotations

import pytest

from .conftest import DemoClient, eventually

pytestmark = pytest.mark.slow

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_healthy_order_runs_every_step_once(plain_demo: DemoClient) -> None:
    response = plain_demo.order()

    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "created"
    assert {"reservation", "charge", "shipment"} <= body.keys()
    assert plain_demo.count("inventory", "reservations_made") == 1
    assert plain_demo.count("inventory", "reservations_active") == 1
    assert plain_demo.count("payment", "charges") == 1
    assert plain_demo.count("shipping", "shipments") == 1
    assert plain_demo.count("order", "compensations") == 0


def test_traceparent_reaches_the_external_upstreams(plain_demo: DemoClient) -> None:
    traceparent = f"00-{TRACE_ID}-00f067aa0ba902b7-01"

    assert plain_demo.order({"traceparent": traceparent}).status_code == 201

    for service in ("order", "inventory", "payment", "shipping", "payment-gateway", "courier"):
        seen = plain_demo.stats(service)["last_traceparent"]
        assert seen.split("-")[1] == TRACE_ID, service
        assert seen != traceparent, f"{service} got the caller's span id, not a child's"


def test_gateway_starts_a_trace_when_the_client_sends_none(plain_demo: DemoClient) -> None:
    assert plain_demo.order().status_code == 201

    gateway_trace = plain_demo.stats("gateway")["last_traceparent"].split("-")[1]
    assert plain_demo.stats("courier")["last_traceparent"].split("-")[1] == gateway_trace


def test_payment_gateway_errors_release_the_reservation(plain_demo: DemoClient) -> None:
    plain_demo.fault("payment-gateway", mode="errors", rate=1.0)

    response = plain_demo.order()

    assert response.status_code == 409
    body = response.json()
    assert body["failed_step"] == "payment"
    assert body["steps_done"] == ["inventory"]
    assert body["compensations"] == 1
    assert plain_demo.count("inventory", "reservations_made") == 1
    assert plain_demo.count("inventory", "reservations_released") == 1
    assert plain_demo.count("inventory", "reservations_active") == 0
    assert plain_demo.count("payment", "charges") == 0
    assert plain_demo.count("payment", "refunds") == 0  # nothing was charged, nothing to refund
    assert plain_demo.count("shipping", "requests") == 0


def test_courier_down_fails_orders_compensates_them_and_recovers(
    plain_demo: DemoClient,
) -> None:
    plain_demo.fault("courier", mode="down")
    orders = 8

    statuses = [plain_demo.order().status_code for _ in range(orders)]

    assert statuses == [409] * orders
    # Plain breakers see only their own hop: every saga reserved and charged, then undid it.
    assert plain_demo.count("order", "compensations") == 2 * orders
    assert plain_demo.count("order", "compensation_failures") == 0
    assert plain_demo.count("inventory", "reservations_made") == orders
    assert plain_demo.count("inventory", "reservations_active") == 0
    assert plain_demo.count("payment", "refunds") == plain_demo.count("payment", "charges")
    # ...but the shipping breaker stopped hammering the courier after its threshold.
    assert plain_demo.count("courier", "faulted") < orders
    assert plain_demo.stats("shipping")["breakers"]["courier"]["state"] == "OPEN"

    plain_demo.clear("courier")

    assert eventually(lambda: plain_demo.order().status_code == 201)
    assert plain_demo.count("courier", "ok") >= 1


def test_without_breakers_every_order_calls_the_broken_courier(direct_demo: DemoClient) -> None:
    direct_demo.fault("courier", mode="down")
    orders = 6

    statuses = [direct_demo.order().status_code for _ in range(orders)]

    assert statuses == [409] * orders
    assert direct_demo.count("courier", "faulted") == orders
    assert direct_demo.count("order", "compensations") == 2 * orders
    assert "breakers" not in direct_demo.stats("order")


def test_slow_courier_times_out_and_the_saga_compensates(plain_demo: DemoClient) -> None:
    # The courier answers after 10 s, beyond the 3 s call timeout of the demo's hops.
    plain_demo.fault("courier", mode="slow", delay=10.0)

    response = plain_demo.order()

    assert response.status_code == 409
    assert response.json()["failed_step"] == "shipping"
    assert plain_demo.count("shipping", "shipments_failed") == 1
    assert plain_demo.count("inventory", "reservations_active") == 0


def test_a_killed_courier_is_a_real_outage_until_restarted(plain_demo: DemoClient) -> None:
    system = plain_demo.system
    old_pid = system.pids()["courier"]
    system.kill("courier")
    try:
        response = plain_demo.order()

        assert response.status_code == 409  # connection refused: the saga compensated
        assert response.json()["failed_step"] == "shipping"
        assert plain_demo.count("inventory", "reservations_active") == 0
    finally:
        system.restart("courier")

    assert system.pids()["courier"] != old_pid
    assert eventually(lambda: plain_demo.order().status_code == 201)
