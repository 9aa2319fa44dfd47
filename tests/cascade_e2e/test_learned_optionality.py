"""Learned optionality end to end: an endpoint that survives a dependency is never refused
because of it, without any annotation.

    A GET /page → B GET /widget   the app falls back when B fails (no `ccb-optional` header)
    A GET /hard → B GET /widget   the app fails with B (424)

B is a plain app, killed in the tests; A's breaker for B opens after three failures.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cascadebreaker.sidecar.grpc.client import SidecarClient

from .apps import App, Call
from .conftest import Sidecar, app, get, make_sidecar, start_all, wait_for

pytestmark = pytest.mark.slow


@dataclass
class Site:
    a_app: App
    b_app: App
    a: Sidecar

    def call(self, path: str) -> int:
        return get(self.a.url("inbound") + path).status_code

    def edge(self, caller: str) -> dict[str, Any]:
        edges = self.a.cascade()["edges"]
        found: dict[str, Any] = next(e for e in edges if e["caller"] == f"A GET {caller}")
        return found


async def _check(address: str, upstream: str, endpoint: str) -> Any:
    async with SidecarClient(address) as client:
        return await client.check(upstream, endpoint)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    b_app = app("B", {"/widget": []})
    a_app = app(
        "A",
        {"/page": [Call("B", "/widget", fallback=True)], "/hard": [Call("B", "/widget")]},
    )
    breaker = {"failure_threshold": 3, "recovery_timeout": 60}
    a = make_sidecar(
        tmp_path,
        "A",
        a_app,
        {"B": {"url": b_app.url, "breaker": breaker}},
        cascade={"optionality": {"trickle_interval": 0.5}},
    )
    start_all([a])
    site = Site(a_app, b_app, a)
    try:
        assert site.call("/page") == 200
        assert site.call("/hard") == 200
        assert site.edge("/page")["optionality"] == "required"  # learned, nothing known yet
        yield site
    finally:
        a.stop()
        a_app.stop()
        b_app.stop()


def test_the_failures_that_trip_the_breaker_teach_optionality(site: Site) -> None:
    site.b_app.stop()
    for _ in range(3):  # B fails; the page still answers (degraded): evidence of survival
        assert site.call("/page") == 200
    wait_for(lambda: site.a.status()["breakers"]["B"]["state"] == "OPEN", "A's breaker opens")
    edge = site.edge("/page")
    assert edge["optionality"] == "optional (learned)"
    assert edge["required"] is False
    assert edge["evidence"]["survived"] >= 3
    assert site.a.available("GET /page")
    for _ in range(5):
        assert site.call("/page") == 200  # never refused because of B
    # /availability and gRPC Check show the edge with its optionality and evidence.
    shown = site.a.availability("GET /page")["edges"]
    assert [(e["callee"], e["optionality"]) for e in shown] == [
        ("B GET /widget", "optional (learned)")
    ]
    check = asyncio.run(_check(site.a.grpc_address, "B", "GET /widget"))
    by_caller = {e.caller: e for e in check.edges}
    assert by_caller["A GET /page"].optionality == "optional (learned)"
    assert by_caller["A GET /page"].survived >= 3
    assert by_caller["A GET /hard"].optionality == "required"
    assert by_caller["A GET /hard"].required
    # The endpoint that fails with B is refused early, as before (a trickled request fails).
    assert not site.a.available("GET /hard")
    assert site.call("/hard") in (503, 424)
    assert site.edge("/hard")["optionality"] == "required"


def test_an_endpoint_held_before_any_evidence_trickles_until_it_shows_it_survives(
    site: Site,
) -> None:
    site.b_app.stop()
    for _ in range(3):  # only /hard meets B's failure: A learns nothing about /page
        assert site.call("/hard") == 424
    wait_for(lambda: not site.a.available("GET /page"), "A GET /page held")
    assert site.edge("/page")["optionality"] == "required"
    # A trickle of requests reaches the page (at most one per 0.5 s) and it survives.
    wait_for(lambda: site.call("/page") == 200 and site.a.available("GET /page"), "learned")
    assert site.edge("/page")["optionality"] == "optional (learned)"
    assert site.a.cascade()["trickled"] >= 1
    for _ in range(5):
        assert site.call("/page") == 200


def test_config_wins_over_evidence(tmp_path: Path) -> None:
    b_app = app("B", {"/widget": []})
    a_app = app("A", {"/page": [Call("B", "/widget", fallback=True)]})
    edges = [{"caller": "A GET /page", "callee": "B GET /widget"}]
    a = make_sidecar(
        tmp_path,
        "A",
        a_app,
        {"B": {"url": b_app.url, "breaker": {"failure_threshold": 3}}},
        cascade={"edges": edges},
    )
    start_all([a])
    try:
        b_app.stop()
        for _ in range(3):
            assert get(a.url("inbound") + "/page").status_code == 200
        wait_for(lambda: not a.available("GET /page"), "declared required: held")
        edge = next(e for e in a.cascade()["edges"] if e["caller"] == "A GET /page")
        assert edge["optionality"] == "required"
        assert edge["evidence"]["survived"] >= 3  # seen, and overruled by config
    finally:
        a.stop()
        a_app.stop()


def test_a_breaker_that_trips_before_the_page_answers_refuses_no_page(tmp_path: Path) -> None:
    # The race the experiment found under load: B's failures trip A's breaker while the pages
    # that survived them are still working, so no evidence has landed yet. Until it lands the
    # page must stay available: a request arriving now is served, degraded, not refused.
    b_app = app("B", {"/widget": []})
    a_app = app("A", {"/page": [Call("B", "/widget", fallback=True, then_wait=1.5)]})
    a = make_sidecar(
        tmp_path,
        "A",
        a_app,
        {"B": {"url": b_app.url, "breaker": {"failure_threshold": 3, "recovery_timeout": 60}}},
    )
    start_all([a])
    try:
        assert get(a.url("inbound") + "/page").status_code == 200  # A learns the edge
        b_app.stop()
        with ThreadPoolExecutor(3) as pool:
            slow = [pool.submit(get, a.url("inbound") + "/page") for _ in range(3)]
            wait_for(lambda: a.status()["breakers"]["B"]["state"] == "OPEN", "A's breaker opens")
            edge = next(e for e in a.cascade()["edges"] if e["caller"] == "A GET /page")
            assert edge["evidence"]["survived"] == 0  # the three pages are still working
            assert a.available("GET /page")
            assert get(a.url("inbound") + "/page").status_code == 200  # served, not refused
            assert [f.result().status_code for f in slow] == [200, 200, 200]
        wait_for(
            lambda: (
                next(e for e in a.cascade()["edges"] if e["caller"] == "A GET /page")["optionality"]
                == "optional (learned)"
            ),
            "the edge is learned optional",
        )
        assert a.available("GET /page")
    finally:
        a.stop()
        a_app.stop()
