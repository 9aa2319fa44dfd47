"""A minimal aiohttp reverse proxy: the Python-framework peer of the sidecar benchmark.

    python bench/sidecar/aiohttp_proxy.py PORT UPSTREAM_URL

What a developer writes in a few lines: one keep-alive ClientSession, the request forwarded with
its end-to-end headers, the whole response relayed. Runs on uvloop when installed, like the
sidecar, so the comparison is about the HTTP engine rather than the event loop.
"""

from __future__ import annotations

import asyncio
import sys

from aiohttp import ClientSession, TCPConnector, web

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
}


def build_app(upstream: str) -> web.Application:
    """The proxy application: every path forwarded to `upstream`."""
    app = web.Application()

    async def session_ctx(app: web.Application):  # type: ignore[no-untyped-def]
        app["session"] = ClientSession(connector=TCPConnector(limit=256), auto_decompress=False)
        yield
        await app["session"].close()

    async def forward(request: web.Request) -> web.Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        body = await request.read()
        async with app["session"].request(
            request.method, upstream + request.rel_url.raw_path_qs, headers=headers, data=body
        ) as reply:
            payload = await reply.read()
            out = {k: v for k, v in reply.headers.items() if k.lower() not in HOP_BY_HOP}
            return web.Response(status=reply.status, headers=out, body=payload)

    app.cleanup_ctx.append(session_ctx)
    app.router.add_route("*", "/{tail:.*}", forward)
    return app


def main() -> None:
    """Serve until killed."""
    port, upstream = int(sys.argv[1]), sys.argv[2].rstrip("/")
    try:
        import uvloop
    except ImportError:
        pass
    else:
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    web.run_app(build_app(upstream), host="127.0.0.1", port=port, access_log=None, print=None)


if __name__ == "__main__":
    main()
