"""The gRPC client is small: importing it loads neither the proxy nor pydantic (a process of
its own, so nothing imported by other tests counts)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_LOADED = (
    "import json, sys, {module}; "
    "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('cascadebreaker', "
    "'pydantic', 'yaml', 'httptools', 'prometheus_client')))))"
)


@pytest.mark.parametrize(
    "module", ["cascadebreaker.sidecar.grpc.client", "cascadebreaker.sidecar.grpc_client"]
)
def test_the_grpc_client_imports_alone(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _LOADED.format(module=module)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    loaded = json.loads(done.stdout)
    assert module in loaded
    sidecar = [m for m in loaded if m.startswith("cascadebreaker.sidecar.")]
    assert all(m.startswith(("cascadebreaker.sidecar.grpc", module)) for m in sidecar), sidecar
    assert not [m for m in loaded if not m.startswith("cascadebreaker")], loaded
