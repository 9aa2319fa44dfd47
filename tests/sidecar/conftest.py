"""Sidecar test fixtures: a scriptable upstream HTTP server and a real sidecar process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import yaml

from cascadebreaker.testing.ports import free_port as free_port


@dataclass
class UpstreamState:
    """What the upstream saw, and gates a test can open."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    upload_chunks: list[bytes] = field(default_factory=list)
    in_flight: int = 0
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _UpstreamServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _upload(self) -> None:
        """Read a chunked body piece by piece, noting each piece as it arrives."""
        state = self.server.state
        while True:
            size = int(self.rfile.readline().split(b";")[0], 16)
            if size == 0:
                self.rfile.readline()
                break
            state.upload_chunks.append(self.rfile.read(size))
            self.rfile.readline()
        self._send(200, b"%d pieces" % len(state.upload_chunks))

    def _handle(self) -> None:
        state = self.server.state
        if self.path == "/upload":
            self._upload()
            return
        if self.path == "/slow-drain":  # reads a big body slowly, answers with its size
            remaining = int(self.headers.get("content-length") or 0)
            total = 0
            while remaining:
                piece = self.rfile.read(min(65536, remaining))
                if not piece:
                    break
                remaining -= len(piece)
                total += len(piece)
                if total % (1 << 20) < 65536:
                    time.sleep(0.005)
            self._send(200, b"%d" % total)
            return
        if self.path == "/early":  # answers without reading the request body
            self._send(413, b"too large")
            self.close_connection = True
            return
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        body = self._body()
        record = {
            "method": self.command,
            "path": self.path,
            "headers": [(k.lower(), v) for k, v in self.headers.items()],
            "body": body,
        }
        with state.lock:
            state.requests.append(record)
            state.in_flight += 1
        try:
            self._route(url.path, query, body)
        finally:
            with state.lock:
                state.in_flight -= 1

    def _route(self, path: str, query: dict[str, str], body: bytes) -> None:
        if path.startswith("/status/"):
            self._send(int(path.rsplit("/", 1)[1]), b"status")
        elif path == "/echo":
            self._send(200, body, self.headers.get("content-type", "application/octet-stream"))
        elif path == "/headers":
            payload = {
                "headers": [[k.lower(), v] for k, v in self.headers.items()],
                "path": self.path,
            }
            self._send(200, json.dumps(payload).encode(), "application/json")
        elif path == "/slow":
            time.sleep(float(query.get("s", "1")))
            self._send(200, b"slow done")
        elif path == "/hang":
            self.server.state.release.wait(30)
            self._send(200, b"released")
        elif path == "/stream":
            # First chunk at once, the rest only when the test releases: proves streaming.
            self.send_response(200)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"6\r\nfirst\n\r\n")
            self.wfile.flush()
            self.server.state.release.wait(30)
            for i in range(int(query.get("n", "3"))):
                piece = f"chunk {i}\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
        elif path == "/close-delimited":
            self.send_response(200)
            self.send_header("content-type", "text/plain")
            self.end_headers()
            self.wfile.write(b"until the end")
            self.close_connection = True
        elif path == "/respond-with":  # every query parameter becomes a response header
            self.send_response(200)
            for name, value in query.items():
                self.send_header(name, value)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
        elif path == "/big":
            self._send(200, b"x" * int(query.get("size", "1000000")))
        else:
            self._send(200, b"ok " + self.path.encode())

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = _handle


class _UpstreamServer(ThreadingHTTPServer):
    daemon_threads = True
    state: UpstreamState


@dataclass
class Upstream:
    """A running scriptable upstream."""

    port: int
    state: UpstreamState
    server: _UpstreamServer

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def start_upstream() -> Upstream:
    """Start a threaded upstream server on a free port."""
    server = _UpstreamServer(("127.0.0.1", 0), _Handler)
    server.state = UpstreamState()
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return Upstream(server.server_address[1], server.state, server)


@pytest.fixture(scope="module")
def module_upstream() -> Iterator[Upstream]:
    """One upstream for the module."""
    up = start_upstream()
    yield up
    up.state.release.set()
    up.server.shutdown()
    up.server.server_close()


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    """A fresh upstream for one test."""
    up = start_upstream()
    yield up
    up.state.release.set()
    up.server.shutdown()
    up.server.server_close()


@dataclass
class SidecarProcess:
    """A `ccb sidecar` child process and its listener URLs."""

    process: subprocess.Popen[bytes]
    config_path: Path
    ports: dict[str, int]

    def url(self, listener: str) -> str:
        return f"http://127.0.0.1:{self.ports[listener]}"

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = httpx.get(self.url("admin") + "/status", timeout=5).json()
        return result

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        return self.process.returncode


def sidecar_command(config_path: Path) -> list[str]:
    """The command line that runs a sidecar (the real CLI entry point)."""
    return [sys.executable, "-m", "cascadebreaker.cli", "sidecar", "--config", str(config_path)]


def start_sidecar(
    tmp_path: Path,
    upstreams: dict[str, dict[str, Any]],
    app: str | None = None,
    preexec_fn: Callable[[], None] | None = None,
    **extra: Any,
) -> SidecarProcess:
    """Write a config with free ports, start the sidecar, wait until /readyz answers 200.

    `preexec_fn` runs in the child before the sidecar starts (e.g. to lower its ulimit)."""
    ports = {name: free_port() for name in ("outbound", "inbound", "admin")}
    config: dict[str, Any] = {
        "service": "checkout",
        "listen": {
            "outbound": f"127.0.0.1:{ports['outbound']}",
            "inbound": f"127.0.0.1:{ports['inbound']}" if app else None,
            "grpc": None,
            "admin": f"127.0.0.1:{ports['admin']}",
        },
        "store": "memory",
        "upstreams": upstreams,
        **extra,
    }
    if app:
        config["app"] = app
    path = tmp_path / f"sidecar-{ports['admin']}.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        sidecar_command(path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=preexec_fn,
    )
    sidecar = SidecarProcess(process, path, ports)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            err = process.stderr.read().decode() if process.stderr else ""
            raise RuntimeError(f"sidecar exited with {process.returncode}: {err}")
        try:
            if httpx.get(sidecar.url("admin") + "/readyz", timeout=1).status_code == 200:
                return sidecar
        except httpx.HTTPError:
            time.sleep(0.05)
    sidecar.stop()
    raise RuntimeError("sidecar did not become ready")


@pytest.fixture
def sidecar_factory(tmp_path: Path) -> Iterator[Any]:
    """Start sidecars on demand; all are stopped at the end of the test."""
    started: list[SidecarProcess] = []

    def factory(upstreams: dict[str, dict[str, Any]], **kwargs: Any) -> SidecarProcess:
        sidecar = start_sidecar(tmp_path, upstreams, **kwargs)
        started.append(sidecar)
        return sidecar

    yield factory
    for sidecar in started:
        sidecar.stop()
        if sidecar.process.stderr is not None:
            sidecar.process.stderr.close()
