"""examples/node-grpc (grpc-js, proto-loader, protobufjs from npm) against a real sidecar: the
signing vectors, Call, a refusal read as the rich error, Check, and a verified Watch update.

Needs node and `npm ci` in examples/node-grpc (.ci/run does both); skipped with the reason when
either is missing, except under CI=true, where that is a failure."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import SidecarProcess, free_port, start_ccb_sidecar

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "node-grpc"
SECRET = "node-example-secret"

pytestmark = pytest.mark.slow


def _node() -> str:
    node = shutil.which("node")
    missing = None
    if node is None:
        missing = "node is not installed"
    elif not (EXAMPLE / "node_modules" / "@grpc" / "grpc-js").is_dir():
        missing = "run `npm ci` in examples/node-grpc"
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the Node example: {missing}")
        pytest.skip(missing)
    assert node is not None
    return node


@pytest.fixture
def signed_sidecar(upstream_server: str, tmp_path: Path) -> Iterator[SidecarProcess]:
    """`ccb sidecar` with a gRPC listener and a cascade secret (its updates are signed)."""
    grpc_port, admin_port = free_port(), free_port()
    config = {
        "service": "checkout",
        "listen": {
            "outbound": None,
            "inbound": None,
            "grpc": f"127.0.0.1:{grpc_port}",
            "admin": f"127.0.0.1:{admin_port}",
        },
        "upstreams": {
            "payment": {
                "url": upstream_server,
                "timeout": 5.0,
                "breaker": {"failure_threshold": 2, "recovery_timeout": 30},
            }
        },
        "cascade": {"secret": SECRET},
        "log_level": "warning",
    }
    sidecar = start_ccb_sidecar(config, tmp_path)
    yield sidecar
    sidecar.stop()


def test_the_node_client_sees_the_words_of_the_contract(signed_sidecar: SidecarProcess) -> None:
    node = _node()
    result = subprocess.run(
        [node, "client.mjs", "--target", signed_sidecar.grpc_address, "--secret", SECRET],
        cwd=EXAMPLE,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    steps = {line["step"]: line for line in map(json.loads, result.stdout.splitlines())}
    assert steps["vectors"] == {"step": "vectors", "ok": True, "count": 3}
    assert steps["call"]["status"] == 200
    refused = steps["refused"]
    assert (refused["reason"], refused["circuitState"], refused["reasonCode"]) == (
        "CIRCUIT_OPEN",
        "OPEN",
        "circuit_open",
    )
    assert 0 < refused["retryAfter"] <= 30 and 0 < refused["retryDelayMs"] <= 30_000
    chain = [{"endpoint": "payment * *", "reason": "circuit_open"}]
    assert refused["causeChain"] == chain == steps["check"]["causeChain"]
    assert steps["check"]["circuitState"] == "CIRCUIT_STATE_OPEN"
    watch = steps["watch"]
    assert (watch["endpoint"], watch["available"], watch["reason"]) == (
        "checkout POST /v1/orders",
        False,
        "circuit_open",
    )
    assert watch["causeChain"] == ["payment * *", "checkout POST /v1/orders"]
    assert watch["signed"] and watch["verified"]
