"""The demo through real sidecars: every call goes app → own sidecar → peer sidecar → app."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from cascadebreaker.demo.launcher import DemoSystem
from cascadebreaker.demo.topology import Timings

from .conftest import DemoClient, eventually

pytestmark = pytest.mark.slow
pytest.importorskip("cascadebreaker.sidecar.command")

# A recovery timeout long enough that the outage is stable while the test looks at it.
SIDECAR_TIMINGS = Timings(call_timeout=3.0, failure_threshold=3, recovery_timeout=5.0)
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"


@pytest.fixture(scope="module")
def sidecar_demo() -> Iterator[DemoClient]:
    system = DemoSystem.create("sidecar", SIDECAR_TIMINGS)
    system.start()
    client = DemoClient(system)
    try:
        yield client
    finally:
        client.http.close()
        system.stop()


@pytest.fixture
def mesh(sidecar_demo: DemoClient) -> DemoClient:
    """The sidecar-mode demo with faults cleared and app counters zeroed."""
    sidecar_demo.reset()
    return sidecar_demo


def test_orders_flow_through_the_sidecars(mesh: DemoClient) -> None:
    traceparent = f"00-{TRACE_ID}-00f067aa0ba902b7-01"

    response = mesh.order({"traceparent": traceparent})

    assert response.status_code == 201, response.text
    assert mesh.count("courier", "ok") == 1
    assert mesh.stats("courier")["last_traceparent"].split("-")[1] == TRACE_ID
    # The apps called their own sidecars: the sidecars kept breakers for those upstreams.
    admin = mesh.topology.service("order").admin_url
    breakers = httpx.get(f"{admin}/status", trust_env=False).json()["breakers"]
    assert set(breakers) >= {"inventory", "payment", "shipping"}


def test_payment_gateway_errors_release_the_reservation_through_sidecars(
    mesh: DemoClient,
) -> None:
    mesh.fault("payment-gateway", mode="errors", rate=1.0)

    response = mesh.order()

    assert response.status_code == 409, response.text
    assert response.json()["failed_step"] == "payment"
    assert mesh.count("inventory", "reservations_made") == 1
    assert mesh.count("inventory", "reservations_released") == 1
    assert mesh.count("payment", "refunds") == 0


def test_courier_outage_is_refused_before_inventory_and_recovers(mesh: DemoClient) -> None:
    for _ in range(5):  # healthy traffic: the sidecars learn who calls whom
        assert mesh.order().status_code == 201
    mesh.fault("courier", mode="down")

    # Orders fail (and compensate) until shipping's breaker opens and the cascade propagates.
    assert eventually(lambda: mesh.order().status_code == 503, deadline=30)
    reserved = mesh.count("inventory", "reservations_made")
    charged = mesh.count("payment", "charges")
    compensated = mesh.count("order", "compensations")

    refused = [mesh.order() for _ in range(5)]

    assert [r.status_code for r in refused] == [503] * 5
    assert mesh.count("inventory", "reservations_made") == reserved  # inventory untouched
    assert mesh.count("payment", "charges") == charged
    assert mesh.count("order", "compensations") == compensated  # nothing to undo

    mesh.clear("courier")

    assert eventually(lambda: mesh.order().status_code == 201, deadline=30)
