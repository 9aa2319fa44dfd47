"""`breaker.scope: endpoint`: one failing endpoint of an upstream does not open its siblings."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from cascadebreaker.sidecar.schema import ConfigError, parse_config

from .conftest import SidecarProcess, Upstream


def _sidecar(factory: Any, upstream: Upstream, **breaker: Any) -> SidecarProcess:
    settings = {"failure_threshold": 3, "recovery_timeout": 30, **breaker}
    sidecar: SidecarProcess = factory({"payment": {"url": upstream.url, "breaker": settings}})
    return sidecar


def test_an_endpoint_breaker_opens_alone(sidecar_factory: Any, upstream: Upstream) -> None:
    sidecar = _sidecar(sidecar_factory, upstream, scope="endpoint")
    outbound = sidecar.url("outbound") + "/payment"
    with httpx.Client(timeout=10) as client:
        for _ in range(3):
            assert client.get(outbound + "/status/502").status_code == 502
        refused = client.get(outbound + "/status/200")  # the same endpoint: GET /status/{id}
        assert refused.status_code == 503
        assert refused.headers["ccb-refusal"].startswith("circuit_open ")
        assert client.get(outbound + "/echo").status_code == 200  # a healthy sibling
        assert client.get(outbound + "/headers?x=1").status_code == 200
    status = sidecar.status()["breakers"]["payment"]
    assert status["state"] == "CLOSED"  # the upstream's own breaker heard nothing
    assert status["endpoints"]["GET /status/{id}"]["state"] == "OPEN"
    assert status["endpoints"]["GET /echo"]["state"] == "CLOSED"


def test_past_max_endpoints_calls_share_the_upstream_breaker(
    sidecar_factory: Any, upstream: Upstream
) -> None:
    sidecar = _sidecar(sidecar_factory, upstream, scope="endpoint", max_endpoints=1)
    outbound = sidecar.url("outbound") + "/payment"
    with httpx.Client(timeout=10) as client:
        assert client.get(outbound + "/echo").status_code == 200  # the one endpoint breaker
        for _ in range(3):
            assert client.get(outbound + "/status/502").status_code == 502
        assert client.get(outbound + "/headers").status_code == 503  # shares it: open
        assert client.get(outbound + "/echo").status_code == 200
    status = sidecar.status()["breakers"]["payment"]
    assert status["state"] == "OPEN"
    assert list(status["endpoints"]) == ["GET /echo"]


def test_the_default_scope_is_the_whole_upstream(sidecar_factory: Any, upstream: Upstream) -> None:
    sidecar = _sidecar(sidecar_factory, upstream)
    outbound = sidecar.url("outbound") + "/payment"
    with httpx.Client(timeout=10) as client:
        for _ in range(3):
            assert client.get(outbound + "/status/502").status_code == 502
        assert client.get(outbound + "/echo").status_code == 503
    assert "endpoints" not in sidecar.status()["breakers"]["payment"]


@pytest.mark.parametrize(
    ("breaker", "message"),
    [
        ({"scope": "route"}, "upstreams.p.breaker.scope: input should be 'upstream' or 'endpoint'"),
        ({"max_endpoints": 0}, "upstreams.p.breaker.max_endpoints: must be >= 1"),
    ],
)
def test_bad_scope_settings_name_the_field(breaker: dict[str, Any], message: str) -> None:
    upstream = {"url": "http://127.0.0.1:2", "breaker": breaker}
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config({"service": "s", "app": "http://127.0.0.1:1", "upstreams": {"p": upstream}})
