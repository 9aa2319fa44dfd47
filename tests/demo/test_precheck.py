"""The orchestrator's pre-check: asks the sidecar, fails open, refuses a doomed saga up front."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from cascadebreaker.demo.precheck import Availability, SidecarPrecheck
from cascadebreaker.demo.services import create_app
from cascadebreaker.demo.services.common import ServiceContext
from cascadebreaker.demo.topology import Topology, free_port


@asynccontextmanager
async def admin_answering(status: int, body: object) -> AsyncIterator[tuple[str, list[str]]]:
    """A stand-in sidecar admin port on a real socket; yields its URL and the request lines."""
    seen: list[str] = []
    payload = json.dumps(body).encode()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        seen.append(head.split(b"\r\n", 1)[0].decode())
        writer.write(
            f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
            f"content-length: {len(payload)}\r\nconnection: close\r\n\r\n".encode()
            + payload
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        server.close()


async def test_unavailable_answer_carries_the_cause() -> None:
    body = {"available": False, "cause": ["courier POST /v1/shipments"]}
    async with admin_answering(200, body) as (url, seen), httpx.AsyncClient() as client:
        verdict = await SidecarPrecheck(client, url).check("POST /v1/orders")

    assert verdict == Availability(False, ("courier POST /v1/shipments",))
    assert seen == ["GET /availability?endpoint=POST+%2Fv1%2Forders HTTP/1.1"]


async def test_a_sidecar_without_the_endpoint_turns_the_check_off() -> None:
    async with (
        admin_answering(404, {"error": "not found"}) as (url, seen),
        httpx.AsyncClient() as client,
    ):
        precheck = SidecarPrecheck(client, url)
        first = await precheck.check("POST /v1/orders")
        second = await precheck.check("POST /v1/orders")

    assert first == second == Availability(True)
    assert not precheck.supported
    assert len(seen) == 1  # asked once, then never again


async def test_an_unreachable_sidecar_fails_open() -> None:
    async with httpx.AsyncClient() as client:
        precheck = SidecarPrecheck(client, f"http://127.0.0.1:{free_port()}")
        verdict = await precheck.check("POST /v1/orders")

    assert verdict.available
    assert precheck.supported  # a restart may bring it back: keep asking


class _Refuse:
    async def check(self, endpoint: str) -> Availability:
        return Availability(False, ("courier POST /v1/shipments", f"order {endpoint}"))


async def test_order_refuses_before_any_step_when_the_precheck_says_no() -> None:
    ctx = ServiceContext("order", Topology.allocate("plain"))
    ctx.precheck = _Refuse()
    transport = httpx.ASGITransport(app=create_app(ctx))

    async with httpx.AsyncClient(transport=transport, base_url="http://order") as client:
        response = await client.post("/v1/orders", json={})

    assert response.status_code == 503
    assert response.json()["status"] == "refused"
    assert response.json()["cause"][0] == "courier POST /v1/shipments"
    counts = ctx.stats.snapshot()
    assert counts["sagas_refused"] == 1
    assert not any(key.startswith("calls.") for key in counts)  # no step was attempted
