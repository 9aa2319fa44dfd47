"""The well-formed load: a fixed rate of mixed requests, every answer checked and recorded.

Three kinds, all through checkout's sidecar to payment:
- `charge`: GET /v1/charges/{n} (payment answers itself: always healthy);
- `create`: POST /v1/charges with a body of 1 B to 64 KiB (healthy; the body is checked);
- `chain`: GET /v1/chain/{n} (payment calls ledger: unhealthy while ledger's sidecar is down).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import time
from dataclasses import dataclass

from aiohttp import ClientSession, ClientTimeout, TCPConnector

CLIENT_TIMEOUT = 15.0  # seconds a request may take before it counts as lost
MIX = (("charge", 0.6), ("create", 0.2), ("chain", 0.2))


@dataclass(frozen=True, slots=True)
class Outcome:
    """One request: when it started (s since the run's start), its kind, what came back."""

    at: float
    kind: str
    status: int  # 0: no response (timeout, reset)
    refused: bool  # a 503 refusal by a sidecar (breaker or cascade): retry-after / ccb-cause
    ok: bool  # the expected status and body
    error: str = ""


def _traceparent() -> str:
    return f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01"


class Load:
    """Open-loop load at `rate` requests a second until `stop()`."""

    def __init__(self, base_url: str, rate: float, started: float, seed: int = 14) -> None:
        self.base_url = base_url
        self.rate = rate
        self.started = started
        self.rng = random.Random(seed)
        self.outcomes: list[Outcome] = []
        self.shed = 0  # requests not sent because too many were in flight (the client's limit)
        self._running = True

    def stop(self) -> None:
        """Send no more; in-flight requests finish."""
        self._running = False

    async def run(self, max_in_flight: int = 512) -> None:
        """Send until stopped, then wait for what is in flight."""
        connector = TCPConnector(limit=64, force_close=False)
        timeout = ClientTimeout(total=CLIENT_TIMEOUT)
        async with ClientSession(connector=connector, timeout=timeout) as session:
            tasks: set[asyncio.Task[None]] = set()
            interval = 1 / self.rate
            next_at = time.monotonic()
            while self._running:
                if len(tasks) >= max_in_flight:
                    self.shed += 1
                else:
                    task = asyncio.ensure_future(self._one(session))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                next_at += interval
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            await asyncio.gather(*tasks, return_exceptions=True)

    def _kind(self) -> str:
        roll = self.rng.random()
        for kind, share in MIX:
            if roll < share:
                return kind
            roll -= share
        return MIX[-1][0]

    async def _one(self, session: ClientSession) -> None:
        kind = self._kind()
        n = self.rng.randrange(1, 1_000_000)
        at = time.monotonic() - self.started
        headers = {"traceparent": _traceparent()}
        body = b""
        if kind == "create":
            body = os.urandom(self.rng.choice((1, 100, 4096, 65536)))
            method, path, expected = "POST", "/v1/charges", 201
        elif kind == "chain":
            method, path, expected = "GET", f"/v1/chain/{n}", 200
        else:
            method, path, expected = "GET", f"/v1/charges/{n}", 200
        try:
            async with session.request(
                method, self.base_url + path, data=body or None, headers=headers
            ) as reply:
                payload = await reply.read()
                refused = reply.status == 503 and (
                    "retry-after" in reply.headers
                    or "ccb-cause" in reply.headers
                    or "ccb-refusal" in reply.headers
                )
                ok = reply.status == expected and _body_ok(kind, n, body, payload)
                error = "" if ok else f"{reply.status} {payload[:120]!r}"
                self.outcomes.append(Outcome(at, kind, reply.status, refused, ok, error))
        except Exception as exc:  # every failure of a well-formed request is recorded
            self.outcomes.append(Outcome(at, kind, 0, False, False, repr(exc)[:160]))


def _body_ok(kind: str, n: int, sent: bytes, payload: bytes) -> bool:
    try:
        data = json.loads(payload)
    except ValueError:
        return False
    if kind == "create":
        expected = {"bytes": len(sent), "sha256": hashlib.sha256(sent).hexdigest()}
    elif kind == "chain":
        expected = {"entry": str(n)}
    else:
        expected = {"charge": str(n), "status": "captured"}
    return bool(data == expected)
