"""The page lays out a fleet of 50 services readably: every node drawn, no two overlapping.

The picture is synthetic (served to the page in place of the live stream), so the test needs
no fleet of sidecars; the page and its layout engine are the shipped ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any, cast

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

DEAD = "http://127.0.0.1:9"  # a sidecar that never answers: the page's data is synthetic
LAYERS = (5, 10, 15, 20)  # 50 services; each calls two services of the next layer


def synthetic_picture() -> dict[str, Any]:
    """50 services in four layers, 1-3 endpoints each, required and optional edges."""
    names = [[f"svc-{layer}-{i}" for i in range(n)] for layer, n in enumerate(LAYERS)]
    services, edges = [], []
    for layer, row in enumerate(names):
        for i, name in enumerate(row):
            endpoints = [f"{name} GET /v1/items/{{id}}", f"{name} POST /v1/items"][: 1 + i % 2]
            if i % 5 == 0:
                endpoints.append(f"{name} DELETE /v1/items/{{id}}")
            down = layer >= 2 and i % 7 == 0
            services.append(
                {
                    "name": name,
                    "availability": "unavailable" if down else "available",
                    "causeChain": [],
                    "sidecars": [],
                    "fault": None,
                    "endpoints": [
                        {
                            "id": e,
                            "service": name,
                            "name": e.split(" ", 1)[1],
                            "available": not down,
                            "causeChain": [],
                            "expiresAt": None,
                            "replicas": None,
                            "updates": [],
                        }
                        for e in endpoints
                    ],
                }
            )
            if layer + 1 < len(names):
                nxt = names[layer + 1]
                for k, callee in enumerate((nxt[i % len(nxt)], nxt[(i * 3 + 1) % len(nxt)])):
                    edges.append(
                        {
                            "caller": endpoints[0],
                            "callee": f"{callee} GET /v1/items/{{id}}",
                            "required": k == 0,
                            "available": True,
                        }
                    )
    return {
        "at": 0,
        "version": 1,
        "services": services,
        "edges": edges,
        "breakers": [],
        "faults": [],
        "timeline": [],
        "redis": "none",
        "pacing": {"interval": 5, "minGap": 2},
    }


@pytest.fixture
def dashboard_url() -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "cascadebreaker.cli", "dashboard", "--port", "0", "--sidecar", DEAD],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert process.stdout is not None
    yield process.stdout.readline().split(": ", 1)[1].strip()
    process.terminate()
    process.wait(timeout=20)


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


def test_fifty_services_are_laid_out_without_overlap(page: object, dashboard_url: str) -> None:
    from playwright.sync_api import Route, expect

    pg = cast(Any, page)
    body = f"event: picture\nid: 1\ndata: {json.dumps(synthetic_picture())}\n\n"

    def serve(route: Route) -> None:
        route.fulfill(status=200, headers={"content-type": "text/event-stream"}, body=body)

    pg.route("**/api/events", serve)
    pg.goto(dashboard_url)

    nodes = pg.locator('[data-testid^="service-"] rect')
    expect(nodes).to_have_count(50, timeout=30_000)
    boxes = [nodes.nth(i).bounding_box() for i in range(50)]
    assert all(box and box["width"] > 0 for box in boxes)
    overlapping = [
        (i, j) for i in range(50) for j in range(i + 1, 50) if _overlap(boxes[i], boxes[j])
    ]
    assert overlapping == []
    endpoints = pg.locator('[data-testid^="endpoint-"]')
    assert endpoints.count() == sum(1 + i % 2 + (i % 5 == 0) for n in LAYERS for i in range(n))
    expect(pg.get_by_test_id("service-svc-2-0")).to_have_attribute(
        "data-availability", "unavailable"
    )
