"""`ccb dashboard` as a user runs it: the page, the JSON, the SSE stream, a clean stop."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cascadebreaker.dashboard.server import ASSETS

from .conftest import ShopSidecar

pytestmark = pytest.mark.slow


SOURCES = Path(__file__).resolve().parents[2] / "frontend" / "dashboard"
TOP = ("index.html", "package.json", "package-lock.json", "tsconfig.json", "vite.config.ts")


def sources_hash(root: Path) -> str:
    """What frontend/dashboard/vite.config.ts stamps into the build (same files, same digest)."""
    files = [*TOP, *(p.relative_to(root).as_posix() for p in (root / "src").rglob("*"))]
    digest = hashlib.sha256()
    for name in sorted(f for f in files if (root / f).is_file()):
        content = hashlib.sha256((root / name).read_bytes()).hexdigest()
        digest.update(f"{name}\n{content}\n".encode())
    return digest.hexdigest()


def test_the_shipped_page_was_built_from_the_current_sources() -> None:
    stamp = (ASSETS / "sources.sha256").read_text().strip()

    assert stamp == sources_hash(SOURCES), (
        "src/cascadebreaker/web/dashboard is older than frontend/dashboard: run `make assets` "
        "and commit the result"
    )


def test_the_built_page_and_every_asset_it_loads_are_shipped() -> None:
    page = (ASSETS / "index.html").read_text()

    referenced = re.findall(r'(?:src|href)="\./(assets/[^"]+)"', page)

    assert any(r.endswith(".js") for r in referenced), page
    for path in referenced:
        assert (ASSETS / path).is_file(), f"{path} is referenced but not built (make assets)"


@pytest.fixture
def dashboard(shop: ShopSidecar) -> Iterator[tuple[subprocess.Popen[str], str]]:
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "cascadebreaker.cli", "dashboard", "--port", "0"),
            *("--sidecar", shop.admin_url, "--interval", "600", "--min-gap", "600"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert process.stdout is not None
    first = process.stdout.readline()
    match = re.match(r"ccb dashboard: (http://\S+)", first)
    assert match, first + process.stdout.read()
    yield process, match.group(1)
    if process.poll() is None:
        process.kill()
        process.wait(timeout=10)


def _events(response: httpx.Response) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event name, JSON data) of each Server-Sent Event."""
    name, data = "message", []
    for line in response.iter_lines():
        if not line:
            if data:
                yield name, json.loads("\n".join(data))
            name, data = "message", []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())


def _breaker(picture: dict[str, Any], service: str, upstream: str) -> str | None:
    for breaker in picture["breakers"]:
        if (breaker["service"], breaker["upstream"]) == (service, upstream):
            return str(breaker["state"])
    return None


def test_page_json_and_sse_stream_of_a_running_dashboard(
    dashboard: tuple[subprocess.Popen[str], str], shop: ShopSidecar
) -> None:
    process, url = dashboard
    with httpx.Client(base_url=url, trust_env=False, timeout=20) as client:
        page = client.get("/")
        assert page.status_code == 200
        assert '<div id="app">' in page.text
        assert client.get("/healthz").json() == {"status": "ok"}
        script = re.search(r'src="\./(assets/[^"]+\.js)"', page.text)
        assert script and client.get(f"/{script.group(1)}").status_code == 200
        assert client.get("/assets/absent.js").status_code == 404
        assert client.post("/api/picture", content=b"{").status_code == 405  # and it lives on
        assert client.get("/api/nothing").status_code == 404

        with client.stream("GET", "/api/events") as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            events = _events(stream)
            name, picture = next(events)
            assert name == "picture"
            while _breaker(picture, "shop", "pay") != "CLOSED":  # until the first /status
                picture = next(events)[1]

            threading.Thread(target=shop.open_breaker, daemon=True).start()
            while _breaker(picture, "shop", "pay") != "OPEN":
                picture = next(events)[1]

        services = {s["name"]: s for s in picture["services"]}
        assert services["shop"]["availability"] == "unavailable"
        assert client.get("/api/picture").json()["version"] >= picture["version"]

    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0
