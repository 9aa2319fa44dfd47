"""docs/openapi/admin.yaml describes the admin API of a real `ccb sidecar`: schemathesis
generates requests for every operation (query strings included) and checks each answer's status,
content type and body against the description, and that none is a server error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from .conftest import SidecarProcess, free_port

SPEC = Path(__file__).resolve().parents[2] / "docs" / "openapi" / "admin.yaml"
SCHEMA = schemathesis.openapi.from_path(SPEC)
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations()]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from .conftest import start_sidecar

    tmp = tmp_path_factory.mktemp("openapi")
    upstreams = {
        "payment": {"url": f"http://127.0.0.1:{free_port()}", "timeout": 1.0},
        "ledger": {"url": f"http://127.0.0.1:{free_port()}", "timeout": 1.0},
    }
    running: SidecarProcess = start_sidecar(tmp, upstreams)
    # Something to describe: an OPEN breaker with its cause chain (the upstream is dead).
    with httpx.Client(timeout=10) as client:
        for _ in range(5):
            client.get(running.url("outbound") + "/payment/v1/charges/7")
    yield running
    running.stop()


def test_every_operation_is_described() -> None:
    labels = {operation.label for operation in OPERATIONS}
    assert labels == {
        "GET /healthz",
        "GET /readyz",
        "GET /status",
        "GET /availability",
        "GET /metrics",
    }


@pytest.mark.parametrize("operation", OPERATIONS, ids=[op.label for op in OPERATIONS])
def test_the_sidecar_answers_as_described(sidecar: SidecarProcess, operation: Any) -> None:
    base_url = sidecar.url("admin")
    # OpenAPI cannot say "upstream or endpoint, at least one": a request with neither is
    # schema-valid and answered 400, which the description documents (and is checked).
    excluded = [positive_data_acceptance] if operation.label == "GET /availability" else []

    @settings(
        max_examples=40,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy())
    def check(case: Any) -> None:
        case.call_and_validate(base_url=base_url, excluded_checks=excluded)

    check()
