"""The serving process's config: plain classes that mirror the pydantic schema field for field,
and survive the JSON hand-over from `ccb sidecar` unchanged."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from pydantic import BaseModel

from cascadebreaker.core.policies import ConsecutiveFailures, FailureRate
from cascadebreaker.sidecar import config as plain
from cascadebreaker.sidecar.config import config_from_dict, config_to_dict
from cascadebreaker.sidecar.schema import cascade, parse_config, sidecar

MODELS = [
    value
    for module in (sidecar, cascade)
    for value in vars(module).values()
    if isinstance(value, type)
    and issubclass(value, BaseModel)
    and value.__module__ == module.__name__
    and not value.__name__.startswith("_")
]

RICH: dict[str, Any] = {
    "service": "checkout",
    "app": "http://127.0.0.1:8000",
    "listen": {"transparent": "127.0.0.1:15003", "grpc": None},
    "store": "redis://127.0.0.1:6379/0",
    "quorum": {"reporters": 3},
    "upstreams": {
        "payment": {
            "urls": ["http://10.0.0.1:80", "http://10.0.0.2:80"],
            "breaker": {
                "failure_rate": {"rate": 0.3, "window": {"seconds": 5}},
                "slow_call_rate": {"duration": 0.5, "rate": 0.9},
                "scope": "endpoint",
            },
            "retries": {"attempts": 2, "on_statuses": [503]},
            "failure_statuses": ["5xx", 429],
        },
        "ledger": {"url": "http://ledger:8080", "breaker": {"failure_threshold": 3}},
    },
    "grpc_tls": {"cert": "/etc/ccb/tls.crt", "key": "/etc/ccb/tls.key", "ca": "/etc/ccb/ca"},
    "cascade": {
        "secret": "s",
        "edges": [{"caller": "checkout POST /orders", "callee": "payment POST /charges"}],
        "templates": {"payment": ["/charges/{id}"]},
        "alternatives": {"payment": "ledger"},
        "optionality": {"success_statuses": ["2xx", 404]},
    },
}


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_schema_model_has_a_plain_twin_with_its_fields(model: type[BaseModel]) -> None:
    twin = getattr(plain, model.__name__)
    fields = {f.name for f in dataclasses.fields(twin)} - {"source"}
    assert fields == set(model.model_fields) | set(model.model_computed_fields)
    assert twin.__slots__  # plain, slotted: no per-instance dict


def test_the_hand_over_keeps_every_value() -> None:
    config = parse_config(RICH)
    handed = config_from_dict(json.loads(json.dumps(config_to_dict(config))))
    assert handed == config
    assert handed.grpc_tls is not None and handed.grpc_tls.cert == "/etc/ccb/tls.crt"
    assert handed.upstreams["payment"].urls == ("http://10.0.0.1:80", "http://10.0.0.2:80")
    assert handed.upstreams["payment"].failure_table()[429]
    assert handed.cascade.edges[0].callee == "payment POST /charges"
    assert handed.cascade.optionality.success_table()[404]
    assert handed.app_upstream is not None and handed.app_upstream.failure_statuses == ()


def test_a_failure_rate_replaces_consecutive_failures_unless_both_are_written() -> None:
    config = parse_config(RICH)
    rate_only = config.upstreams["payment"].breaker.policies()
    assert [type(p) for p in rate_only][:1] == [FailureRate]
    both = parse_config(
        {
            "service": "s",
            "listen": {"inbound": None},
            "upstreams": {
                "p": {
                    "url": "http://h:1",
                    "breaker": {"failure_threshold": 4, "failure_rate": {"rate": 0.5}},
                }
            },
        }
    )
    kinds = [type(p) for p in both.upstreams["p"].breaker.policies()]
    assert kinds == [ConsecutiveFailures, FailureRate]


def test_a_derived_key_in_the_file_is_unknown() -> None:
    """`consecutive_failures` and `app_upstream` are computed, never read from the file."""
    with pytest.raises(plain.ConfigError, match=r"upstreams\.p\.breaker\.consecutive_failures"):
        parse_config(
            {
                "service": "s",
                "listen": {"inbound": None},
                "upstreams": {"p": {"url": "http://h:1", "breaker": {"consecutive_failures": 1}}},
            }
        )
    with pytest.raises(plain.ConfigError, match=r"^app_upstream: unknown key"):
        parse_config({"service": "s", "listen": {"inbound": None}, "app_upstream": {}})
