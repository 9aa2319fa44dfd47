"""gRPC and Prometheus cost memory only when used: a sidecar loads grpc when a gRPC listener is
configured (or a peer is watched), and prometheus_client at the first /metrics scrape. pydantic
and yaml never load in the serving process: `ccb sidecar` validates, then execs it.

Each case runs a real sidecar in a fresh interpreter (this test process has both libraries
loaded by other tests), which reports `sys.modules` before and after a scrape; the serving
process of `ccb sidecar` is inspected from outside, by the files mapped into it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import Upstream

_PROGRAM = textwrap.dedent(
    """
    import asyncio, json, sys
    from cascadebreaker.sidecar.schema import parse_config
    from cascadebreaker.sidecar.server import SidecarServer

    async def get(port, path):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET " + path + b" HTTP/1.1\\r\\nhost: t\\r\\nconnection: close\\r\\n\\r\\n")
        answer = await reader.read()
        writer.close()
        return answer

    def loaded():
        return {name: name in sys.modules for name in ("grpc", "prometheus_client")}

    async def main():
        config = parse_config(json.loads(sys.argv[1]))
        server = SidecarServer(config)
        await server.start()
        try:
            before = loaded()
            admin = int(server.address("admin").rsplit(":", 1)[1])
            metrics = await get(admin, b"/metrics")
            after = loaded()
        finally:
            await server.stop()
        print(json.dumps({"before": before, "after": after, "metrics": metrics.decode()}))

    asyncio.run(main())
    """
)


def _run(grpc_listener: bool) -> dict[str, object]:
    config = {
        "service": "checkout",
        "listen": {
            "outbound": "127.0.0.1:0",
            "inbound": None,
            "grpc": "127.0.0.1:0" if grpc_listener else None,
            "admin": "127.0.0.1:0",
        },
        "upstreams": {"payment": {"url": "http://127.0.0.1:9"}},
        "log_level": "warning",
    }
    return _fresh_python(_PROGRAM, json.dumps(config))


def _fresh_python(program: str, argument: str) -> dict[str, Any]:
    """Run `program` in a new interpreter; the JSON object its last line prints."""
    done = subprocess.run(
        [sys.executable, "-c", program, argument],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.slow
def test_no_grpc_listener_loads_neither_library_until_a_scrape() -> None:
    result = _run(grpc_listener=False)
    assert result["before"] == {"grpc": False, "prometheus_client": False}
    assert result["after"] == {"grpc": False, "prometheus_client": True}
    metrics = str(result["metrics"])
    assert metrics.startswith("HTTP/1.1 200")
    assert "ccb_sidecar_calls" in metrics
    assert "ccb_cascade_updates_sent" in metrics  # the cascade's collector, registered lazily
    assert "process_resident_memory_bytes" in metrics


@pytest.mark.slow
def test_a_grpc_listener_loads_grpc() -> None:
    result = _run(grpc_listener=True)
    assert result["before"] == {"grpc": True, "prometheus_client": False}


def _mapped_files(pid: int) -> set[str]:
    """The files mapped into a process: every C extension it has imported is one."""
    lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    return {Path(line.split()[-1]).name for line in lines if line.split()[-1].startswith("/")}


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/PID/maps")
def test_the_serving_process_never_imports_pydantic_or_yaml(
    sidecar_factory: Any, module_upstream: Upstream
) -> None:
    """`ccb sidecar` validates with pydantic, then execs (same PID) a process without it."""
    sidecar = sidecar_factory({"payment": {"url": module_upstream.url}})
    answer = httpx.get(sidecar.url("outbound") + "/payment/hello", timeout=5)
    assert answer.status_code == 200
    pid = sidecar.process.pid
    mapped = _mapped_files(pid)
    assert any(name.startswith("parser.cpython") for name in mapped)  # httptools: it works
    assert not [name for name in mapped if "pydantic" in name or name.startswith("_yaml.")]
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"cascadebreaker.sidecar.serve" in cmdline
    assert str(sidecar.config_path).encode() in cmdline  # `ps` still names the file


_SERVED = textwrap.dedent(
    """
    import asyncio, json, sys
    import cascadebreaker.sidecar.serve  # what `python -m cascadebreaker.sidecar.serve` runs
    from cascadebreaker.sidecar.config import config_from_dict
    from cascadebreaker.sidecar.server import SidecarServer

    async def main():
        server = SidecarServer(config_from_dict(json.loads(sys.argv[1])))
        await server.start()
        try:
            port = int(server.address("outbound").rsplit(":", 1)[1])
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /payment/hello HTTP/1.1\\r\\nhost: t\\r\\n")
            writer.write(b"connection: close\\r\\n\\r\\n")
            answer = await reader.read()
            writer.close()
        finally:
            await server.stop()
        print(json.dumps({"answer": answer.decode(), "modules": sorted(sys.modules)}))

    asyncio.run(main())
    """
)


@pytest.mark.slow
def test_a_served_request_loads_no_module_only_the_cli_needs(module_upstream: Upstream) -> None:
    """The serving process builds its config from the validated JSON form and serves: pathlib
    (0.2 MiB), pydantic and yaml stay with the CLI that validated it. Paths in the config are
    the strings the file gave."""
    from cascadebreaker.sidecar.config import config_to_dict
    from cascadebreaker.sidecar.schema import parse_config

    config = parse_config(
        {
            "service": "checkout",
            "listen": {"outbound": "127.0.0.1:0", "inbound": None, "admin": "127.0.0.1:0"},
            "upstreams": {"payment": {"url": module_upstream.url}},
            "log_level": "warning",
        }
    )
    result = _fresh_python(_SERVED, json.dumps(config_to_dict(config)))
    assert result["answer"].startswith("HTTP/1.1 200"), result["answer"][:200]
    modules = set(result["modules"])
    assert "cascadebreaker.sidecar.proxy.pipeline" in modules  # it served through the pipeline
    assert not {"pathlib", "pydantic", "yaml"} & modules
