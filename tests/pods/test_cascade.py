"""The cascade across pods with transparent interception: unmodified apps, real namespaces.

The apps dial each other's pod addresses; nothing in them knows about sidecars. The kernel
hands their connections to the sidecar (iptables REDIRECT), which applies breakers and the
cascade. Faults: a third party down, a cut link, tc netem delay and loss.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.pods.conftest import require_lab_tools
from tests.pods.netlab import Lab, sweep_leftovers
from tests.pods.shop import PodShop, eventually

pytestmark = [pytest.mark.pods, pytest.mark.slow]


@pytest.fixture(scope="module")
def running_shop(sidecar_uid_reaches_the_checkout: None) -> Iterator[PodShop]:
    require_lab_tools()
    sweep_leftovers()
    lab = Lab()
    shop = PodShop(lab)
    try:
        lab.start()
        shop.start()
        yield shop
    finally:
        shop.close()
        lab.close()


@pytest.fixture
def shop(running_shop: PodShop) -> Iterator[PodShop]:
    """The running shop; every fault undone and orders flowing again after the test."""
    yield running_shop
    for name in ("courier", "payment-gateway"):
        running_shop.clear(name)
    for pod in running_shop.pods.values():
        running_shop.lab.cut_link(pod, up=True)
        running_shop.lab.heal(pod)
    assert eventually(lambda: running_shop.order() == 201, deadline=45)


def learn(shop: PodShop) -> None:
    """Healthy traffic: the sidecars learn who calls whom."""
    for _ in range(5):
        assert shop.order() == 201


def assert_refused_at_the_entry(shop: PodShop) -> None:
    """Orders are refused before inventory is reserved or anything is charged."""
    assert eventually(lambda: shop.order() == 503, deadline=45), shop.logs("gateway")
    reserved = shop.count("inventory", "reservations_made")
    charged = shop.count("payment", "charges")
    for _ in range(5):
        answer = shop.call("POST", "gateway", "/orders", {"item": "widget"})
        assert answer["status"] == 503, answer
    assert shop.count("inventory", "reservations_made") == reserved
    assert shop.count("payment", "charges") == charged


def test_unmodified_apps_are_intercepted(shop: PodShop) -> None:
    learn(shop)
    status = shop.status("order")
    # the app dialled inventory/payment/shipping by address: the transparent listener took them
    assert status["transparent"]["connections"]["routed"] >= 1
    assert {"inventory", "payment", "shipping"} <= set(status["breakers"])
    assert status["breakers"]["payment"]["state"] == "CLOSED"
    destinations = status["transparent"]["destinations"]
    assert destinations[f"{shop.pods['payment'].address}:8080"] == "payment"


def test_third_party_down_is_refused_at_the_entry_and_recovers(shop: PodShop) -> None:
    learn(shop)
    shop.fault("courier", "down")
    assert_refused_at_the_entry(shop)
    assert shop.status("shipping")["breakers"]["courier"]["state"] == "OPEN"
    shop.clear("courier")
    assert eventually(lambda: shop.order() == 201, deadline=45)


def test_cut_link_opens_the_breaker_and_cascades(shop: PodShop) -> None:
    learn(shop)
    shop.lab.cut_link(shop.pods["payment-gateway"])
    assert_refused_at_the_entry(shop)
    assert shop.status("payment")["breakers"]["payment-gateway"]["state"] == "OPEN"
    shop.lab.cut_link(shop.pods["payment-gateway"], up=True)
    assert eventually(lambda: shop.order() == 201, deadline=45)


def test_delay_past_the_timeout_opens_the_breaker(shop: PodShop) -> None:
    learn(shop)
    # courier answers, but later than shipping's sidecar waits for it (tc netem, or a tbf-slowed
    # link on kernels without sch_netem)
    shop.lab.delay(shop.pods["courier"], 2500)
    assert_refused_at_the_entry(shop)
    assert shop.status("shipping")["breakers"]["courier"]["state"] == "OPEN"
    shop.lab.heal(shop.pods["courier"])
    assert eventually(lambda: shop.order() == 201, deadline=45)


def test_total_loss_opens_the_breaker_and_recovers(shop: PodShop) -> None:
    learn(shop)
    shop.lab.loss(shop.pods["payment-gateway"], 100)
    assert_refused_at_the_entry(shop)
    shop.lab.heal(shop.pods["payment-gateway"])
    assert eventually(lambda: shop.order() == 201, deadline=45)
