"""Fixtures for the gRPC API tier: a real HTTP upstream, a sidecar runtime with its gRPC
listener on a free port, and a grpcio (aio) client stub."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import grpc
import pytest
import yaml

from cascadebreaker.sidecar.grpc.api import GrpcServer, start_grpc_server
from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2_grpc
from cascadebreaker.sidecar.proxy.runtime import SidecarRuntime
from cascadebreaker.sidecar.schema import parse_config
from cascadebreaker.sidecar.server import build_runtime
from cascadebreaker.testing.ports import free_port as free_port

# Requests seen per `/fail-first/<n>/<key>` key (the handler runs in the server's threads).
HITS: Counter[str] = Counter()
_HITS_LOCK = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    """`/status/<code>` answers that status; `/fail-first/<n>/<key>` answers 503 to the first
    n requests for `key`, then 200; `?delay=s` waits first; every reply echoes the request
    (method, path, headers as pairs, body) as JSON."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        delay = float(parse_qs(url.query).get("delay", ["0"])[0])
        if delay:
            time.sleep(delay)
        parts = url.path.strip("/").split("/")
        status = int(parts[1]) if len(parts) == 2 and parts[0] == "status" else 200
        if len(parts) == 3 and parts[0] == "fail-first":
            with _HITS_LOCK:
                HITS[parts[2]] += 1
                status = 503 if HITS[parts[2]] <= int(parts[1]) else 200
        echo = {
            "method": self.command,
            "path": self.path,
            "headers": [[n.lower(), v] for n, v in self.headers.items()],
            "body": body.decode("latin-1"),
        }
        payload = json.dumps(echo).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("x-upstream", "one")
        self.send_header("x-upstream", "two")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        # The sidecar hangs up on a timed-out exchange: not an error of this server.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def upstream_server() -> Iterator[str]:
    """A threaded HTTP/1.1 keep-alive server on a free loopback port; yields its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@dataclass
class GrpcSidecar:
    """A sidecar runtime serving the gRPC API, and a client stub connected to it."""

    runtime: SidecarRuntime
    server: GrpcServer
    channel: Any
    stub: Any
    extra: dict[str, Any] = field(default_factory=dict)


def sidecar_config(upstream_url: str, grpc_port: int) -> Any:
    """A config with a healthy upstream, one that trips after 2 failures, and a dead one."""
    return parse_config(
        {
            "service": "checkout",
            "listen": {
                "outbound": None,
                "inbound": None,
                "admin": None,
                "grpc": f"127.0.0.1:{grpc_port}",
            },
            "upstreams": {
                "payment": {
                    "url": upstream_url,
                    "timeout": 5.0,
                    "breaker": {"failure_threshold": 2, "recovery_timeout": 30},
                },
                "refused": {"url": f"http://127.0.0.1:{free_port()}", "timeout": 2.0},
            },
        }
    )


@pytest.fixture
async def grpc_sidecar(upstream_server: str) -> AsyncIterator[GrpcSidecar]:
    """The runtime with its gRPC listener on a free port, and an aio client."""
    config = sidecar_config(upstream_server, free_port())
    runtime = build_runtime(config)
    server = await start_grpc_server(config, runtime)
    assert server is not None
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    stub = sidecar_pb2_grpc.SidecarStub(channel)
    yield GrpcSidecar(runtime, server, channel, stub)
    await channel.close()
    await server.stop(None)
    runtime.close()


@dataclass
class SidecarProcess:
    """A `ccb sidecar` child process and its gRPC address."""

    process: subprocess.Popen[bytes]
    grpc_address: str
    admin_url: str

    def stop(self) -> int:
        """SIGTERM, wait, return the exit code."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        return self.process.returncode


def start_ccb_sidecar(config: dict[str, Any], tmp_path: Path) -> SidecarProcess:
    """`ccb sidecar --config FILE` for `config` (its gRPC and admin listeners set), ready."""
    grpc_address, admin_address = config["listen"]["grpc"], config["listen"]["admin"]
    path = tmp_path / "sidecar.yaml"
    path.write_text(yaml.safe_dump(config))
    ccb = Path(sys.executable).with_name("ccb")
    process = subprocess.Popen([str(ccb), "sidecar", "--config", str(path)])
    sidecar = SidecarProcess(process, grpc_address, f"http://{admin_address}")
    deadline = time.monotonic() + 20
    while True:
        try:
            with urllib.request.urlopen(f"{sidecar.admin_url}/readyz", timeout=1) as reply:
                if reply.status == 200:
                    return sidecar
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            sidecar.stop()
            pytest.fail("ccb sidecar did not become ready")
        time.sleep(0.05)


@pytest.fixture
def sidecar_process(upstream_server: str, tmp_path: Path) -> Iterator[SidecarProcess]:
    """`ccb sidecar --config FILE` with the gRPC listener on a free port, up and ready."""
    grpc_port, admin_port = free_port(), free_port()
    config = {
        "service": "checkout",
        "listen": {
            "outbound": f"127.0.0.1:{free_port()}",
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
        "log_level": "warning",
    }
    sidecar = start_ccb_sidecar(config, tmp_path)
    yield sidecar
    sidecar.stop()
