"""The core breaker policies in the sidecar's YAML: failure rate, slow calls, probes, quorum."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from cascadebreaker import (
    ConsecutiveFailures,
    CountWindow,
    FailureRate,
    FleetQuorum,
    SlowCallRate,
    TimeWindow,
)
from cascadebreaker.sidecar.schema import ConfigError, parse_cascade_config, parse_config

from .conftest import SidecarProcess, Upstream


def _config(breaker: dict[str, Any], **top: Any) -> Any:
    upstream = {"url": "http://127.0.0.1:2", "breaker": breaker}
    return parse_config(
        {"service": "s", "app": "http://127.0.0.1:1", "upstreams": {"p": upstream}, **top}
    )


def test_policies_from_the_yaml() -> None:
    assert _config({}).upstreams["p"].breaker.policies() == [ConsecutiveFailures(5)]
    rate = {"rate": 0.25, "minimum_calls": 4, "window": {"size": 8}}
    assert _config({"failure_rate": rate}).upstreams["p"].breaker.policies() == [
        FailureRate(CountWindow(8), 0.25, 4)
    ]
    both = _config({"failure_rate": {"window": {"seconds": 30}}, "failure_threshold": 3})
    assert both.upstreams["p"].breaker.policies() == [
        ConsecutiveFailures(3),
        FailureRate(TimeWindow(30.0, 10), 0.5, 10),
    ]
    slow = _config({"slow_call_rate": {"duration": 1.5}, "probe_timeout": 2})
    settings = slow.upstreams["p"].breaker
    assert settings.policies() == [
        ConsecutiveFailures(5),
        SlowCallRate(1.5, CountWindow(100), 0.5, 10),
    ]
    assert settings.probe_timeout == 2.0


def test_a_fleet_quorum_for_a_shared_store() -> None:
    config = _config({}, store="redis://127.0.0.1:6379/0", quorum={"reporters": 3})
    assert config.quorum is not None
    assert config.quorum.spec() == FleetQuorum(3, 0.0, 30.0)


@pytest.mark.parametrize(
    ("breaker", "top", "message"),
    [
        ({"failure_rate": {"rate": 0}}, {}, "upstreams.p.breaker.failure_rate.rate: must be > 0"),
        ({"failure_rate": {"rate": 1.5}}, {}, "breaker.failure_rate.rate: must be <= 1"),
        ({"failure_rate": {"minimum_calls": 0}}, {}, "failure_rate.minimum_calls: must be >= 1"),
        (
            {"failure_rate": {"window": {"size": 5, "seconds": 3}}},
            {},
            "upstreams.p.breaker.failure_rate.window: give size (calls) or seconds, not both",
        ),
        ({"failure_rate": {"window": {"size": 0}}}, {}, "failure_rate.window.size: must be >= 1"),
        ({"slow_call_rate": {}}, {}, "upstreams.p.breaker.slow_call_rate.duration: required"),
        ({"slow_call_rate": {"duration": -1}}, {}, "slow_call_rate.duration: must be > 0"),
        ({"probe_timeout": 0}, {}, "upstreams.p.breaker.probe_timeout: must be > 0"),
        ({"half_open_failure_rate": 2}, {}, "breaker.half_open_failure_rate: must be <= 1"),
        ({"failure_rat": {}}, {}, "upstreams.p.breaker.failure_rat: unknown key"),
        ({}, {"quorum": {}}, "quorum: needs a shared store (store: redis://...)"),
        (
            {},
            {"store": "redis://127.0.0.1:1/0", "quorum": {"fraction": 2}},
            "quorum.fraction: must be <= 1",
        ),
    ],
)
def test_bad_policy_settings_name_the_field(
    breaker: dict[str, Any], top: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        _config(breaker, **top)


def test_a_failure_rate_breaker_opens_on_the_rate(sidecar_factory: Any, upstream: Upstream) -> None:
    rate = {"rate": 0.5, "minimum_calls": 4, "window": {"size": 4}}
    sidecar: SidecarProcess = sidecar_factory(
        {"payment": {"url": upstream.url, "breaker": {"failure_rate": rate}}}
    )
    outbound = sidecar.url("outbound") + "/payment"
    with httpx.Client(timeout=10) as client:
        # Never two failures in a row: a consecutive-failures breaker would stay closed.
        for path in ("/echo", "/status/502", "/echo"):
            assert client.get(outbound + path).status_code in (200, 502)
        assert sidecar.status()["breakers"]["payment"]["state"] == "CLOSED"
        assert client.get(outbound + "/status/502").status_code == 502  # 2 of 4: 50 %
        refused = client.get(outbound + "/echo")
    assert refused.status_code == 503
    assert sidecar.status()["breakers"]["payment"]["state"] == "OPEN"


def test_a_bad_failure_status_names_its_key() -> None:
    config = {
        "service": "s",
        "upstreams": {"p": {"url": "http://127.0.0.1:1", "failure_statuses": ["6xx"]}},
    }
    with pytest.raises(ConfigError) as caught:
        parse_config(config)
    assert str(caught.value) == (
        "upstreams.p.failure_statuses: '6xx' is neither a status nor a class like '5xx'"
    )


def test_a_bad_success_status_names_its_key() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_cascade_config({"optionality": {"success_statuses": ["2xx", 99]}})
    assert str(caught.value) == "cascade.optionality.success_statuses: 99 is not an HTTP status"
