"""The two apps behind the chaos run's sidecars (aiohttp), one process each.

    python -m bench.chaos.apps payment PORT LEDGER_URL   # LEDGER_URL: payment's sidecar outbound
    python -m bench.chaos.apps ledger PORT

payment: `GET /v1/charges/{id}` and `POST /v1/charges` answer at once (the healthy path);
`GET /v1/chain/{id}` calls ledger through payment's own sidecar, forwarding `traceparent` and
naming the endpoint it serves, and answers with ledger's status (a refusal passes through).
ledger: `GET /v1/entries/{id}`.
"""

from __future__ import annotations

import hashlib
import sys

from aiohttp import ClientError, ClientSession, ClientTimeout, web


def payment_app(ledger_url: str) -> web.Application:
    """The payment service: two healthy routes and one that depends on ledger."""
    app = web.Application(client_max_size=4 * 1024 * 1024)

    async def start(app: web.Application) -> None:
        app["ledger"] = ClientSession(timeout=ClientTimeout(total=10))

    async def stop(app: web.Application) -> None:
        await app["ledger"].close()

    async def charge(request: web.Request) -> web.Response:
        return web.json_response({"charge": request.match_info["id"], "status": "captured"})

    async def create(request: web.Request) -> web.Response:
        try:
            body = await request.read()
        except ConnectionResetError:  # the sidecar gave up on a client's slow body (its 408)
            return web.Response(status=400)
        digest = hashlib.sha256(body).hexdigest()
        return web.json_response({"bytes": len(body), "sha256": digest}, status=201)

    async def chain(request: web.Request) -> web.Response:
        headers = {"ccb-serving-endpoint": "GET /v1/chain/{id}"}
        if "traceparent" in request.headers:
            headers["traceparent"] = request.headers["traceparent"]
        url = f"{ledger_url}/v1/entries/{request.match_info['id']}"
        try:
            async with app["ledger"].get(url, headers=headers) as reply:
                body = await reply.read()
                passed = {k: v for k, v in reply.headers.items() if k.lower() in _PASSED}
                return web.Response(status=reply.status, body=body, headers=passed)
        except (ClientError, TimeoutError) as exc:
            return web.json_response({"error": f"ledger: {exc!r}"}, status=502)

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_get("/v1/charges/{id}", charge)
    app.router.add_post("/v1/charges", create)
    app.router.add_get("/v1/chain/{id}", chain)
    return app


# A refusal from payment's sidecar keeps what says it is one.
_PASSED = {"content-type", "retry-after", "ccb-cause", "ccb-refusal"}  # relays refusals


def ledger_app() -> web.Application:
    """The ledger service."""
    app = web.Application()

    async def entry(request: web.Request) -> web.Response:
        return web.json_response({"entry": request.match_info["id"]})

    app.router.add_get("/v1/entries/{id}", entry)
    return app


def main(argv: list[str]) -> None:
    """Serve one app on 127.0.0.1:PORT until killed."""
    name, port = argv[1], int(argv[2])
    app = payment_app(argv[3]) if name == "payment" else ledger_app()
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


if __name__ == "__main__":
    main(sys.argv)
