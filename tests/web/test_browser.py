"""The settlement report in headless Chromium: the degraded widget and its partial-reload recovery.

Two `ccb demo web` processes with short settings: one whose circuit, once open, stays open for
a minute (nothing recovers while a test looks), one that probes again after a second and a half.
Faults are switched with `ccb fault`, as a user would.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .demo_process import WebDemoProcess

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# Bounds on waiting for the browser (not timing claims): generous for a loaded machine.
WAIT_MS = 20_000


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDemoProcess]:
    """Opens on the first failure and stays open for 60 s; would wait 60 s on the upstream."""
    demo = WebDemoProcess(
        tmp_path_factory.mktemp("held"),
        *("--failure-threshold", "1", "--recovery-timeout", "60", "--call-timeout", "60"),
    )
    yield demo
    demo.stop()


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDemoProcess]:
    """Opens on the first failure and admits a probe 1.5 s later."""
    demo = WebDemoProcess(
        tmp_path_factory.mktemp("quick"),
        *("--failure-threshold", "1", "--recovery-timeout", "1.5", "--call-timeout", "5"),
    )
    yield demo
    demo.stop()


class Traffic:
    """Every request the page makes, in order."""

    def __init__(self, page: Any) -> None:
        self.requests: list[Any] = []
        page.on("request", lambda request: self.requests.append(request))

    def to(self, url: str, since: int = 0) -> list[Any]:
        """Requests for `url` (query aside) made after the first `since` requests."""
        return [r for r in self.requests[since:] if r.url.split("?")[0] == url]


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def open_report(page: Any, demo: WebDemoProcess) -> None:
    page.goto(demo.url)
    expect(page.get_by_test_id("settlements")).to_be_visible(timeout=WAIT_MS)


def open_degraded(page: Any, demo: WebDemoProcess) -> None:
    """Visit with the settlement API down: the visit's own failed call opens the circuit."""
    demo.ccb("fault", "inject", "settlement-api", "--mode", "down")
    open_report(page, demo)
    expect(page.get_by_test_id("settlements-degraded")).to_be_visible()
    expect(page.get_by_test_id("circuit-state")).to_have_text("OPEN")


def test_a_healthy_page_shows_the_settlements_closed(page: Any, quick: WebDemoProcess) -> None:
    quick.ccb("fault", "clear")

    open_report(page, quick)

    expect(page.get_by_test_id("settlement-row")).to_have_count(12)
    expect(page.get_by_test_id("circuit-state")).to_have_text("CLOSED")
    expect(page.get_by_test_id("settlements-degraded")).to_have_count(0)
    expect(page.get_by_test_id("summary")).to_contain_text("Gross volume")


def test_api_down_shows_the_banner_open_and_the_rest_of_the_page(
    page: Any, held: WebDemoProcess
) -> None:
    open_degraded(page, held)

    banner = page.get_by_test_id("settlements-degraded")
    expect(banner).to_contain_text("temporarily unavailable")
    expect(page.get_by_test_id("settlements-retry-in")).to_contain_text("Retrying automatically")
    expect(page.get_by_test_id("settlements-retry")).to_be_enabled()
    expect(page.get_by_test_id("summary")).to_contain_text("Net payout")
    expect(page.get_by_test_id("summary")).to_contain_text("12")


def test_retry_is_one_partial_reload_and_never_a_page_load(page: Any, held: WebDemoProcess) -> None:
    open_degraded(page, held)
    page.evaluate("window.__ccbFirstLoad = 'still here'")
    traffic = Traffic(page)
    upstream_calls = held.api_requests()

    with page.expect_response(lambda r: r.url.startswith(held.url), timeout=WAIT_MS):
        page.get_by_test_id("settlements-retry").click()
    expect(page.get_by_test_id("settlements-retry")).to_be_enabled()  # the reload has finished

    [reload] = traffic.to(held.url)
    assert reload.resource_type in ("xhr", "fetch")
    headers = reload.all_headers()
    assert headers["x-inertia"] == "true"
    assert headers["x-inertia-partial-data"] == "settlements"
    assert headers["x-inertia-partial-component"] == "Reports/Settlements"
    assert not [r for r in traffic.requests if r.resource_type == "document"]
    assert page.evaluate("window.__ccbFirstLoad") == "still here"
    expect(page.get_by_test_id("circuit-state")).to_have_text("OPEN")
    expect(page.get_by_test_id("summary")).to_contain_text("Gross volume")  # kept from the visit
    assert held.api_requests() == upstream_calls  # open: the reload did not call the API


def test_the_partial_reload_does_not_wait_on_a_hanging_upstream(
    page: Any, held: WebDemoProcess
) -> None:
    open_degraded(page, held)
    # From now on the API hangs for ten minutes, and the page would wait 60 s for it: an answer
    # within WAIT_MS can only come from the open circuit.
    held.ccb("fault", "inject", "settlement-api", "--mode", "slow", "--delay", "600")
    upstream_calls = held.api_requests()

    with page.expect_response(lambda r: r.url.startswith(held.url), timeout=WAIT_MS) as answered:
        page.get_by_test_id("settlements-retry").click()

    value = answered.value.json()["props"]["settlements"]
    assert (value["circuitState"], value["reason"]) == ("OPEN", "circuit_open")
    assert held.api_requests() == upstream_calls
    held.ccb("fault", "clear")


def test_after_the_fault_clears_the_widget_recovers_by_itself(
    page: Any, quick: WebDemoProcess
) -> None:
    open_degraded(page, quick)
    page.evaluate("window.__ccbFirstLoad = 'still here'")
    traffic = Traffic(page)

    quick.ccb("fault", "clear")

    # No click: the widget retries when retryAfter has passed, and the probe closes the circuit.
    expect(page.get_by_test_id("settlements-degraded")).to_have_count(0, timeout=WAIT_MS)
    expect(page.get_by_test_id("circuit-state")).to_have_text("CLOSED")
    expect(page.get_by_test_id("settlement-row")).to_have_count(12)
    expect(page.get_by_test_id("settlements-stale")).to_have_count(0)
    reloads = traffic.to(quick.url)
    assert reloads, "the widget never retried"
    for reload in reloads:
        assert reload.all_headers()["x-inertia-partial-data"] == "settlements"
    assert not [r for r in traffic.requests if r.resource_type == "document"]
    assert page.evaluate("window.__ccbFirstLoad") == "still here"


def test_the_page_has_no_console_errors(page: Any, quick: WebDemoProcess) -> None:
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    quick.ccb("fault", "clear")

    open_report(page, quick)
    expect(page.get_by_test_id("settlement-row")).to_have_count(12)

    assert errors == []
