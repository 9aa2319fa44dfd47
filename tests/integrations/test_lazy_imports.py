"""`import cascadebreaker` loads no integration's library; each integration loads only its own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

LIBRARIES = {
    "aiohttp",
    "celery",
    "django",
    "fastapi",
    "flask",
    "google.protobuf",
    "grpc",
    "httpx",
    "opentelemetry",
    "prometheus_client",
    "redis",
    "requests",
    "stamina",
    "starlette",
    "tenacity",
}


def loaded_after(statement: str) -> set[str]:
    """Top-level libraries from LIBRARIES in sys.modules after `statement`, in a fresh process."""
    code = f"import sys, json\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    modules = set(json.loads(out))
    return {lib for lib in LIBRARIES if lib in modules}


def test_the_package_imports_no_integration_library() -> None:
    assert loaded_after("import cascadebreaker; cascadebreaker.CircuitBreaker('x')") == set()


def test_the_testing_helpers_import_no_integration_library() -> None:
    assert loaded_after("import cascadebreaker.testing.plugin") == set()


@pytest.mark.parametrize(
    ("module", "own"),
    [
        ("requests", {"requests"}),
        ("aiohttp", {"aiohttp"}),
        ("grpc", {"grpc", "google.protobuf"}),
        ("flask", {"flask"}),
        ("opentelemetry", {"opentelemetry"}),
        ("tenacity", {"tenacity"}),
        ("stamina", set()),  # the hook is a plain function: stamina calls it, we import nothing
        # kombu may bring the redis client along, and celery probes for Django when installed
        ("celery", {"celery", "redis", "django"}),
    ],
)
def test_an_integration_imports_only_its_own_library(module: str, own: set[str]) -> None:
    loaded = loaded_after(f"import cascadebreaker.integrations.{module}")
    assert loaded <= own, loaded - own
