"""The report page speaks the Inertia protocol (inertia-django's own test case drives it).

Partial reloads return only the props they name and run only their guarded call; a stale asset
version gets a 409; a degraded upstream still gives a 200 page.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings
from inertia.test import InertiaTestCase

from cascadebreaker.demo.web.site import views
from cascadebreaker.demo.web.source import SourceConfig

from . import inertia_views
from .conftest import SettlementApi

COMPONENT = "Reports/Settlements"
URL = "/reports/settlements?day=2026-01-05"


def partial(only: str, component: str = COMPONENT) -> dict[str, str]:
    """The headers `router.reload({only: [...]})` sends."""
    return {
        "HTTP_X_INERTIA_PARTIAL_DATA": only,
        "HTTP_X_INERTIA_PARTIAL_COMPONENT": component,
        "HTTP_X_INERTIA_VERSION": settings.INERTIA_VERSION,
    }


@pytest.mark.usefixtures("settlement_api")
class TestReportPage(InertiaTestCase):
    databases: Any = set()  # the demo site has no database
    api: SettlementApi

    def setUp(self) -> None:
        super().setUp()
        config = SourceConfig(self.api.url, call_timeout=5.0, failure_threshold=2)
        override = override_settings(CCB_DEMO_WEB=config.to_json())
        override.enable()
        self.addCleanup(override.disable)
        views._source.cache_clear()  # a fresh breaker for every test
        self.api.clear()

    def test_first_visit_renders_every_prop_in_the_html(self) -> None:
        response = self.client.get(URL)

        assert response.status_code == 200
        self.assertComponentUsed(COMPONENT)
        props = self.props()
        assert set(props) == {"day", "summary", "settlements"}
        assert props["summary"]["count"] == 12
        settlements = props["settlements"]
        assert (settlements["isDegraded"], settlements["circuitState"]) == (False, "CLOSED")
        assert len(settlements["data"]) == 12
        assert b'<script data-page="app" type="application/json">' in response.content
        assert b"/static/ccb-demo/assets/main-" in response.content  # the built entry script

    def test_a_partial_reload_returns_only_the_named_prop(self) -> None:
        response = self.inertia.get(URL, **partial("settlements"))

        assert response.status_code == 200
        assert response.headers["X-Inertia"] == "true"
        assert response.headers["Content-Type"] == "application/json"
        assert "X-Inertia" in response.headers["Vary"]
        assert set(self.props()) == {"settlements"}
        assert self.props()["settlements"]["data"][0]["id"] == "stl_20260105_001"

    def test_a_partial_reload_of_another_prop_never_calls_the_settlement_api(self) -> None:
        before = self.api.requests()

        self.inertia.get(URL, **partial("summary"))

        self.assertHasExactProps({"summary": self.props()["summary"]})
        assert self.api.requests() == before

    def test_each_visit_calls_the_api_once(self) -> None:
        before = self.api.requests()

        self.client.get(URL)
        self.inertia.get(URL, **partial("settlements"))

        assert self.api.requests() == before + 2

    def test_a_stale_asset_version_gets_409_with_the_location(self) -> None:
        response = self.inertia.get(URL, HTTP_X_INERTIA_VERSION="an-old-build")

        assert response.status_code == 409
        assert response.headers["X-Inertia-Location"] == f"http://testserver{URL}"

    def test_a_down_api_still_gives_a_200_page_with_degraded_props(self) -> None:
        self.client.get(URL)  # a good value to keep
        self.mock_render.reset_mock()  # page() reads the first visit's HTML while it has one
        self.api.fault(mode="down")

        first = self.inertia.get(URL)
        assert first.status_code == 200
        props = self.props()
        assert props["summary"]["count"] == 12  # the rest of the page is untouched
        assert props["settlements"]["isDegraded"] is True
        assert props["settlements"]["reason"] == "upstream_error"

        self.inertia.get(URL, **partial("settlements"))  # the second failure opens the circuit
        before = self.api.requests()
        rejected = self.inertia.get(URL, **partial("settlements"))

        assert rejected.status_code == 200
        assert self.api.requests() == before  # open: the API is not called
        value = self.props()["settlements"]
        assert (value["circuitState"], value["reason"]) == ("OPEN", "circuit_open")
        assert 0 < value["retryAfter"] <= 10.0
        assert (value["stale"], value["data"][0]["id"]) == (True, "stl_20260105_001")

    def test_a_bad_day_is_a_400(self) -> None:
        assert self.client.get("/reports/settlements?day=someday").status_code == 400


@override_settings(ROOT_URLCONF=inertia_views.__name__)
class TestLazyGuardedProps(InertiaTestCase):
    databases: Any = set()

    def setUp(self) -> None:
        super().setUp()
        inertia_views.breaker.reset()
        inertia_views.upstream.calls = 0

    def test_an_optional_prop_is_not_called_on_a_first_visit(self) -> None:
        self.client.get("/lazy")

        self.assertHasExactProps({"title": "lazy"})
        assert inertia_views.upstream.calls == 0

    def test_an_optional_prop_is_not_called_on_a_reload_of_another_prop(self) -> None:
        self.inertia.get("/lazy", **partial("title", inertia_views.COMPONENT))

        self.assertHasExactProps({"title": "lazy"})
        assert inertia_views.upstream.calls == 0

    def test_a_reload_naming_the_optional_prop_runs_its_guarded_call_once(self) -> None:
        self.inertia.get("/lazy", **partial("settlements", inertia_views.COMPONENT))

        value = self.props()["settlements"]
        assert set(self.props()) == {"settlements"}
        assert (value["data"], value["isDegraded"]) == (["stl_1", "stl_2"], False)
        assert inertia_views.upstream.calls == 1

    def test_a_deferred_prop_is_announced_then_fetched_by_its_group(self) -> None:
        self.client.get("/deferred")
        assert self.deferred_props() == {"slow": ["settlements"]}
        assert inertia_views.upstream.calls == 0
        self.mock_render.reset_mock()

        self.inertia.get("/deferred", **partial("settlements", inertia_views.COMPONENT))

        assert self.props()["settlements"]["circuitState"] == "CLOSED"
        assert inertia_views.upstream.calls == 1
