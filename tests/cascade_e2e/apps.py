"""Tiny real apps for the cascade tests: threaded stdlib HTTP servers that call their sidecar.

An app serves routes; each route makes calls to upstreams through its own sidecar's outbound
listener and answers 200 when every required call answered 2xx, else 424 (a status that no
breaker counts, so only the breaker the test aims at trips). How a call carries context:

- `trace`: forwards the W3C trace-id with a new span id (what OpenTelemetry does), nothing else;
- `request-id`: forwards `x-request-id` only;
- `header`: names the endpoint it serves with `ccb-serving-endpoint`, no trace context;
- `naive`: forwards every header it received (an app that passes headers on blindly).

A call with `relay` makes the route answer a failed call's status and its `ccb-refusal` header
(an app that relays its upstream's refusal, as an API gateway does); a call with `fallback` may
fail and the route still answers 200 (a degraded widget), with no `ccb-optional` header.
"""

from __future__ import annotations

import http.client
import json
import os
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOP_BY_HOP = {"host", "content-length", "connection", "transfer-encoding", "keep-alive"}


@dataclass(frozen=True)
class Call:
    """One outbound call a route makes."""

    upstream: str
    path: str
    mode: str = "trace"  # trace | request-id | header | naive
    optional: bool = False
    relay: bool = False
    fallback: bool = False  # a failed call is survived (degraded), without any header
    then_wait: float = 0.0  # seconds of work after this call, before the route answers


@dataclass
class AppState:
    """What the app saw (inbound request headers, by path)."""

    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    service: str
    routes: dict[str, list[Call]]
    owner: App
    state: AppState


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        server = self.server
        path = self.path.split("?", 1)[0]
        headers = {k.lower(): v for k, v in self.headers.items()}
        with server.state.lock:
            server.state.seen.append((path, headers))
        failed: list[dict[str, Any]] = []
        answer, relayed = 200, None
        for call in server.routes.get(path, []):
            status, refusal = self._call(call, path, headers)
            time.sleep(call.then_wait)
            if not 200 <= status < 300 and call.relay:
                answer, relayed = status, refusal
            elif not 200 <= status < 300 and not (call.optional or call.fallback):
                failed.append({"upstream": call.upstream, "path": call.path, "status": status})
        body = json.dumps(
            {"service": server.service, "path": path, "failed": failed, "headers": headers}
        ).encode()
        self.send_response(424 if failed else answer)
        if relayed is not None:
            self.send_header("ccb-refusal", relayed)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _call(self, call: Call, path: str, inbound: dict[str, str]) -> tuple[int, str | None]:
        headers: dict[str, str] = {}
        if call.mode == "trace" and "traceparent" in inbound:
            trace_id = inbound["traceparent"].split("-")[1]
            headers["traceparent"] = f"00-{trace_id}-{os.urandom(8).hex()}-01"
        elif call.mode == "request-id" and "x-request-id" in inbound:
            headers["x-request-id"] = inbound["x-request-id"]
        elif call.mode == "header":
            headers["ccb-serving-endpoint"] = f"{self.server.service} GET {path}"
        elif call.mode == "naive":
            headers = {k: v for k, v in inbound.items() if k not in HOP_BY_HOP}
        if call.optional:
            headers["ccb-optional"] = "1"
        port = self.server.owner.outbound_port  # known once its sidecar is configured
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("GET", f"/{call.upstream}{call.path}", headers=headers)
            response = conn.getresponse()
            response.read()
            return response.status, response.getheader("ccb-refusal")
        except OSError:
            return 599, None
        finally:
            conn.close()


class App:
    """One app process-in-a-thread; `stop()` kills it, `start()` brings it back on its port."""

    def __init__(
        self, service: str, port: int, routes: dict[str, list[Call]], outbound_port: int = 0
    ) -> None:
        self.service = service
        self.port = port
        self.routes = routes
        self.outbound_port = outbound_port
        self.state = AppState()
        self._server: _Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Listen and serve in a daemon thread."""
        server = _Server(("127.0.0.1", self.port), _Handler)
        server.service = self.service
        server.routes = self.routes
        server.owner = self
        server.state = self.state
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        self._server = server

    def stop(self) -> None:
        """Stop listening (connections are refused from now on)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
