"""Fixtures shared by every test tier: a throwaway redis-server on a free port."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RedisServer:
    """A redis-server process owned by the tests."""

    port: int
    process: subprocess.Popen[bytes]
    workdir: str

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        """Kill the server (simulates an outage)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def start(self) -> None:
        """(Re)start the server on the same port."""
        self.process = _spawn_redis(self.port, self.workdir)


def _spawn_redis(port: int, workdir: str) -> subprocess.Popen[bytes]:
    binary = shutil.which("redis-server")
    assert binary is not None
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            workdir,
            "--protected-mode",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return proc
        except OSError:
            time.sleep(0.02)
    proc.kill()
    raise RuntimeError(f"redis-server did not start on port {port}")


def _require_redis() -> None:
    if shutil.which("redis-server") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("redis-server is not installed; CI must not skip Redis tests")
        pytest.skip("redis-server is not installed")


def _throwaway_redis() -> Iterator[RedisServer]:
    _require_redis()
    workdir = tempfile.mkdtemp(prefix="ccb-redis-")
    port = free_port()
    server = RedisServer(port=port, process=_spawn_redis(port, workdir), workdir=workdir)
    yield server
    server.stop()
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A redis-server shared by the session's tests (flush between tests if you need to)."""
    yield from _throwaway_redis()


@pytest.fixture
def own_redis_server() -> Iterator[RedisServer]:
    """A redis-server for one test alone, free to be killed and restarted."""
    yield from _throwaway_redis()


# Headless Chromium for browser tests: Debian's chromium driven by Python Playwright (browser
# downloads fail on these machines, so the binary is the system one, never Playwright's own).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _require_chromium() -> str:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    missing = None
    if binary is None:
        missing = "chromium is not installed (Debian package chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            missing = "Python Playwright is not installed (pip install -e '.[dev]')"
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{missing}; CI must not skip browser tests")
        pytest.skip(missing)
    assert binary is not None
    return binary


# Module scope, not session: while Playwright's sync API is open, its event loop counts as running
# on the main thread, so every later asyncio.run / async test / asgiref AsyncToSync would fail.
@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    """A headless Chromium (playwright `Browser`) shared by one module's browser tests."""
    binary = _require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=binary, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium: object) -> Iterator[object]:
    """A fresh browser page (its own context: no cookies or storage shared between tests)."""
    context = chromium.new_context(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
    pg = context.new_page()
    yield pg
    context.close()
