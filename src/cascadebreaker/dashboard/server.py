"""The dashboard's web server: the page, its assets, the picture as JSON and as an SSE stream.

GET /             the page (built assets shipped in cascadebreaker/web/dashboard)
GET /api/picture  the current picture (JSON)
GET /api/events   Server-Sent Events: `picture` on connect and after every change
GET /healthz      {"status": "ok"}
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from cascadebreaker.dashboard.aggregator import Aggregator

__all__ = ["ASSETS", "create_app"]

ASSETS = Path(__file__).resolve().parent.parent / "web" / "dashboard"
_RETRY_MS = 1000  # the browser reconnects this soon after losing the stream
_PING = 15  # seconds between keep-alive comments (proxies close silent streams)
# At most one picture per browser per this many seconds: the first change goes out at once, a
# burst after it (a cascade is several updates within milliseconds) becomes one more picture.
_THROTTLE = 0.05


def create_app(aggregator: Aggregator, assets: Path = ASSETS) -> Starlette:
    """The ASGI app serving `aggregator`'s picture; it starts and stops the aggregator."""

    async def index(_request: Request) -> Response:
        page = assets / "index.html"
        if not page.is_file():
            return PlainTextResponse(
                "the dashboard's page is not built: run `make assets`", status_code=503
            )
        return FileResponse(page, headers={"cache-control": "no-cache"})

    async def current(_request: Request) -> Response:
        _version, document = aggregator.picture_json()
        return Response(document, media_type="application/json")

    async def events(_request: Request) -> EventSourceResponse:
        async def stream() -> AsyncIterator[ServerSentEvent]:
            version, document = aggregator.picture_json()
            yield ServerSentEvent(data=document, event="picture", id=str(version), retry=_RETRY_MS)
            while True:
                await asyncio.sleep(_THROTTLE)
                version, document = await aggregator.next_picture(version)
                yield ServerSentEvent(data=document, event="picture", id=str(version))

        return EventSourceResponse(stream(), ping=_PING, headers={"cache-control": "no-store"})

    async def healthz(_request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await aggregator.start()
        try:
            yield
        finally:
            await aggregator.stop()

    return Starlette(
        routes=[
            Route("/", index),
            Route("/api/picture", current),
            Route("/api/events", events),
            Route("/healthz", healthz),
            Mount("/assets", StaticFiles(directory=assets / "assets", check_dir=False)),
        ],
        lifespan=lifespan,
    )
