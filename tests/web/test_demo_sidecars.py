"""`ccb demo web --sidecars`: the article's report page behind its own sidecar. Settlement API
down: the page is still served, degraded, and never refused; nobody marked anything optional,
the sidecar learned it from the page's answers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .demo_process import WebDemoProcess

pytestmark = pytest.mark.slow

PAGE_TO_API = ("web GET /reports/settlements", "settlement-api GET /v1/settlements")


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[WebDemoProcess]:
    running = WebDemoProcess(
        tmp_path, "--sidecars", "--failure-threshold", "3", "--recovery-timeout", "60"
    )
    yield running
    running.stop()


def _edge(demo: WebDemoProcess) -> dict[str, object]:
    admin = demo.recorded["topology"]["services"]["web"]["sidecar"]["admin"]
    status = demo.http.get(f"http://127.0.0.1:{admin}/status").json()
    edges = status["cascade"]["edges"]
    found: dict[str, object] = next(e for e in edges if (e["caller"], e["callee"]) == PAGE_TO_API)
    return found


def test_the_page_survives_the_settlement_api_and_is_never_refused(demo: WebDemoProcess) -> None:
    assert set(demo.recorded["pids"]) == {"settlement-api", "web", "web-sidecar"}
    assert demo.http.get(demo.url).status_code == 200
    assert _edge(demo)["optionality"] == "required"  # learned from the trace the sidecar began
    demo.ccb("fault", "inject", "settlement-api", "--mode", "down")
    statuses = [demo.http.get(demo.url).status_code for _ in range(12)]
    assert statuses == [200] * 12  # degraded, never refused
    edge = _edge(demo)
    assert edge["optionality"] == "optional (learned)"
    assert edge["required"] is False
