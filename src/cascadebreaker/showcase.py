"""`ccb showcase`: a short, real run of the library against a flaky HTTP upstream on loopback."""

from __future__ import annotations

import argparse
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .breaker import CircuitBreaker
from .degraded import FallbackReason
from .events import TransitionEvent


class _FlakyUpstream(BaseHTTPRequestHandler):
    """Answers 200 while healthy, 503 while `down` is set."""

    down = threading.Event()

    def do_GET(self) -> None:
        status, body = (503, b"down") if self.down.is_set() else (200, b"price=42")
        self.send_response(status)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep the timeline readable


def run(args: argparse.Namespace) -> int:
    """Start the upstream, call it through a breaker while it fails and recovers."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FlakyUpstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/price"
    start = time.monotonic()

    def stamp() -> str:
        return f"{time.monotonic() - start:6.2f}s"

    def on_transition(event: TransitionEvent) -> None:
        print(
            f"{stamp()}  ** {event.from_state} -> {event.to_state} ({event.detail or event.reason})"
        )

    breaker = CircuitBreaker(
        "pricing",
        failure_threshold=3,
        recovery_timeout=args.recovery,
        listeners=[on_transition],
        log_transitions=False,  # the timeline prints them; no second copy on stderr
    )

    def fetch() -> str:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return str(resp.read().decode())

    def fallback(reason: FallbackReason) -> str:
        return "price=cached" if reason.rejected else "price=cached (after error)"

    print(f"upstream {url}; breaker: 3 consecutive failures, {args.recovery}s open wait\n")
    phases = [("healthy", False, 4), ("upstream down", True, 10), ("upstream back", False, 6)]
    for phase, down, calls in phases:
        _FlakyUpstream.down.set() if down else _FlakyUpstream.down.clear()
        print(f"{stamp()}  --- {phase} ---")
        for _ in range(calls):
            result = breaker.guard(fetch, fallback=fallback)
            tag = "DEGRADED" if result.is_degraded else "ok      "
            print(f"{stamp()}  {tag} {result.data!s:28} state={result.circuit_state}")
            time.sleep(args.interval)
        if down:  # wait out the open period so the probe meets a healthy upstream
            _FlakyUpstream.down.clear()
            print(f"{stamp()}  (waiting {breaker.retry_after:.1f}s for the open wait to end)")
            time.sleep(breaker.retry_after)
    snapshot = breaker.snapshot()
    print(f"\nfinal state {snapshot['state']}; calls {snapshot['calls']}")
    server.shutdown()
    return 0


def register(subparsers: Any) -> None:
    """Add `ccb showcase`."""
    p = subparsers.add_parser("showcase", help="a short real run of the breaker library")
    p.add_argument("--recovery", type=float, default=2.0, help="open wait in seconds")
    p.add_argument("--interval", type=float, default=0.15, help="seconds between calls")
    p.set_defaults(handler=run)
