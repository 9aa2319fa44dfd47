"""The worker-pool service of the source article: 8 sync workers, one route on a hanging upstream.

`/slow-route` calls an upstream (which hangs in the scenario) and `/other` does not. Both are
sync routes, so both need one of the service's bounded worker threads. Without a breaker the
hanging calls hold every worker and `/other` dies with them; with one, `/slow-route` fails fast
once the breaker opens and `/other` keeps its workers.

Run as a process: `python -m cascadebreaker.demo.workerpool --port P --upstream URL [--breaker]`.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
import httpx
import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from cascadebreaker.demo.topology import HOST


@dataclass(frozen=True)
class PoolSettings:
    """The service's knobs: pool size, upstream and its timeout, and the optional breaker."""

    upstream: str
    workers: int = 8
    upstream_timeout: float = 2.0
    breaker: bool = False
    failure_threshold: int = 3
    recovery_timeout: float = 5.0


def create_app(settings: PoolSettings) -> FastAPI:
    """The worker-pool service's app."""
    breaker = None
    if settings.breaker:
        from cascadebreaker import CircuitBreaker

        breaker = CircuitBreaker(
            "upstream",
            failure_threshold=settings.failure_threshold,
            recovery_timeout=settings.recovery_timeout,
        )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # The bounded worker pool: sync routes run in anyio's default thread limiter.
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.workers
        yield

    app = FastAPI(lifespan=lifespan, docs_url=None, redoc_url=None)
    client = httpx.Client(trust_env=False, timeout=settings.upstream_timeout)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        # async on purpose: health must not queue behind the worker pool
        return {"status": "ok"}

    @app.get("/slow-route", response_model=None)
    def slow_route() -> dict[str, Any] | JSONResponse:
        if breaker is None:
            return _call_upstream(client, settings.upstream)
        from cascadebreaker import CircuitOpenError

        try:
            permit = breaker.acquire()
        except CircuitOpenError as exc:
            return JSONResponse(
                {"error": "upstream unavailable", "retryAfter": exc.retry_after}, status_code=503
            )
        result = _call_upstream(client, settings.upstream)
        if isinstance(result, JSONResponse):
            permit.failure()
        else:
            permit.success()
        return result

    @app.get("/other")
    def other() -> dict[str, Any]:
        # A little real work that never touches the upstream.
        digest = hashlib.sha256(b"other" * 100).hexdigest()
        return {"ok": True, "digest": digest[:8]}

    return app


def _call_upstream(client: httpx.Client, url: str) -> dict[str, Any] | JSONResponse:
    try:
        response = client.get(url)
    except httpx.TimeoutException:
        return JSONResponse({"error": "upstream timeout"}, status_code=504)
    except httpx.HTTPError as exc:
        return JSONResponse({"error": type(exc).__name__}, status_code=502)
    if response.status_code >= 500:
        return JSONResponse({"error": f"upstream {response.status_code}"}, status_code=502)
    return {"ok": True}


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the worker-pool service until SIGTERM."""
    parser = argparse.ArgumentParser(prog="cascadebreaker.demo.workerpool")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--upstream-timeout", type=float, default=2.0)
    parser.add_argument("--breaker", action="store_true")
    parser.add_argument("--failure-threshold", type=int, default=3)
    parser.add_argument("--recovery-timeout", type=float, default=5.0)
    args = parser.parse_args(argv)
    settings = PoolSettings(
        upstream=args.upstream,
        workers=args.workers,
        upstream_timeout=args.upstream_timeout,
        breaker=args.breaker,
        failure_threshold=args.failure_threshold,
        recovery_timeout=args.recovery_timeout,
    )
    config = uvicorn.Config(
        create_app(settings),
        host=HOST,
        port=args.port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=1,
    )
    uvicorn.Server(config).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
