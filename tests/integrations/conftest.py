"""Fixtures for the integration tests: a real HTTP upstream on loopback and a fake clock."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cascadebreaker.testing.ports import free_port


class Upstream:
    """A threaded HTTP server on 127.0.0.1 that answers `/status/<code>` and `/sleep/<seconds>`."""

    def __init__(self) -> None:
        self.hits = 0
        self._lock = threading.Lock()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with upstream._lock:
                    upstream.hits += 1
                parts = self.path.strip("/").split("/")
                status = 200
                if parts[0] == "status":
                    status = int(parts[1])
                elif parts[0] == "sleep":
                    time.sleep(float(parts[1]))
                body = f"{self.path}\n".encode()
                try:
                    self.send_response(status)
                    self.send_header("content-length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client timed out and went away

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        """Absolute URL of `path` on this server."""
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def netloc(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.close()


@pytest.fixture
def other_upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.close()


@pytest.fixture
def dead_url() -> str:
    """A URL on a loopback port where nothing listens (connect errors)."""
    port = free_port()
    return f"http://127.0.0.1:{port}/"


class FakeClock:
    """A monotonic clock the test advances by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@contextlib.contextmanager
def serve_wsgi(app: object) -> Iterator[str]:
    """Serve a WSGI app with werkzeug's threaded server on a free loopback port; yield its URL."""
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app, threaded=True)  # type: ignore[arg-type]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)


@contextlib.contextmanager
def serve_asgi(app: object) -> Iterator[str]:
    """Serve an ASGI app under a real uvicorn server on a free loopback port; yield its URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")  # type: ignore[arg-type]
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
