"""A throwaway `redis-server` on a free loopback port, owned by the test that started it.

Needs only the `redis-server` binary (Debian's `redis-server` package), not the Python client:
the readiness check and `flush()` speak RESP over a plain socket.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .ports import free_port

__all__ = ["RedisServer", "RedisServerMissing", "free_port", "throwaway_redis"]


class RedisServerMissing(RuntimeError):
    """`redis-server` is not on PATH."""


@dataclass
class RedisServer:
    """A redis-server process: `url` to connect, `stop()`/`start()` to simulate an outage."""

    port: int
    process: subprocess.Popen[bytes]
    workdir: str

    @property
    def url(self) -> str:
        """`redis://127.0.0.1:<port>/0`."""
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        """Kill the server (simulates an outage)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def start(self) -> None:
        """(Re)start the server on the same port."""
        self.process = _spawn(self.port, self.workdir)

    def flush(self) -> None:
        """Drop every key (FLUSHALL), so the next test starts from an empty server."""
        reply = _command(self.port, b"FLUSHALL")
        if not reply.startswith(b"+OK"):
            raise RuntimeError(f"FLUSHALL failed on port {self.port}: {reply!r}")


def _command(port: int, command: bytes, timeout: float = 2.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(command + b"\r\n")
        return s.recv(64)


def _spawn(port: int, workdir: str) -> subprocess.Popen[bytes]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RedisServerMissing("redis-server is not installed (Debian package redis-server)")
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", workdir]
    args += ["--save", "", "--appendonly", "no", "--protected-mode", "no"]  # no disk, no auth
    proc = subprocess.Popen(
        args,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if _command(port, b"PING", timeout=0.2).startswith(b"+PONG"):
                return proc
        except OSError:
            time.sleep(0.02)
    proc.kill()
    proc.wait(timeout=10)
    raise RuntimeError(f"redis-server did not start on port {port}")


@contextmanager
def throwaway_redis() -> Iterator[RedisServer]:
    """Start a redis-server in a temporary directory; stop it and remove the directory after."""
    workdir = tempfile.mkdtemp(prefix="ccb-redis-")
    try:
        port = free_port()
        server = RedisServer(port=port, process=_spawn(port, workdir), workdir=workdir)
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
