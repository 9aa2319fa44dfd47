"""Fixtures of the web tests: Django configured as the demo site, a real settlement API.

Django is configured once per test process (its settings are global); test classes point the
site at their own settlement API with `override_settings`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from django.conf import settings

from cascadebreaker.demo.services.common import ServiceContext
from cascadebreaker.demo.topology import HOST, Timings, Topology
from cascadebreaker.demo.web.settlement_api import create_app
from cascadebreaker.demo.web.site.settings import configure
from cascadebreaker.demo.web.source import SourceConfig
from cascadebreaker.demo.web.system import web_topology

if not settings.configured:
    # A dead address until a test names its own API: nothing reaches it by accident.
    configure(SourceConfig("http://127.0.0.1:9"))


class SettlementApi:
    """The demo's settlement API served by uvicorn on a free loopback port, in a thread."""

    def __init__(self, topology: Topology) -> None:
        self.spec = topology.service("settlement-api")
        app = create_app(ServiceContext("settlement-api", topology))
        config = uvicorn.Config(app, host=HOST, port=self.spec.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        self.http = httpx.Client(base_url=self.url, trust_env=False, timeout=10.0)
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the settlement API did not start")
            time.sleep(0.02)

    @property
    def url(self) -> str:
        return self.spec.app_url

    def requests(self) -> int:
        """Business requests the API has received (not /_fault, /_stats or /healthz)."""
        return int(self.http.get("/_stats").json()["counts"].get("requests", 0))

    def fault(self, **body: Any) -> None:
        self.http.post("/_fault", json=body).raise_for_status()

    def clear(self) -> None:
        self.http.delete("/_fault").raise_for_status()

    def close(self) -> None:
        self.http.close()
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(scope="class")
def settlement_api(request: pytest.FixtureRequest) -> Iterator[SettlementApi]:
    """A settlement API for a test class (also set as `self.api` on unittest classes)."""
    api = SettlementApi(web_topology(Timings()))
    if request.cls is not None:
        request.cls.api = api
    yield api
    api.close()
