"""Two replicas of A sharing Redis, with a shared secret: both learn; forgeries are rejected.

A1, A2 (replicas of A)  GET /a, GET /naive → B GET /b → Z GET /z
only A1 is ever called, so only A1 subscribes to B's Watch stream; A2 learns through Redis.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from cascadebreaker.cascade import AvailabilityUpdate, Cause, Endpoint

from .apps import App, Call
from .conftest import Sidecar, app, get, make_sidecar, start_all, wait_for

SECRET = "e2e-shared-secret"


@dataclass
class Replicas:
    apps: dict[str, App]
    sidecars: dict[str, Sidecar]
    redis_url: str
    channel: str


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory, redis_server: Any) -> Iterator[Replicas]:
    workdir: Path = tmp_path_factory.mktemp("replicas")
    url = f"redis://127.0.0.1:{redis_server.port}/5"
    namespace = f"e2e-{time.monotonic_ns()}"
    cascade = {"namespace": namespace}
    env = {"CCB_SECRET": SECRET}
    routes = {"/a": [Call("B", "/b")], "/naive": [Call("B", "/b", "naive")]}
    apps = {
        "A1": app("A", routes),
        "A2": app("A", routes),
        "B": app("B", {"/b": [Call("Z", "/z")]}),
        "Z": app("Z", {"/z": []}),
    }
    b = make_sidecar(
        workdir,
        "B",
        apps["B"],
        {"Z": {"url": apps["Z"].url, "breaker": {"failure_threshold": 2, "recovery_timeout": 2}}},
        cascade=cascade,
        store=url,
        env=env,
    )
    a1, a2 = (
        make_sidecar(
            workdir,
            "A",
            apps[name],
            {"B": {"url": b.url("inbound")}},
            cascade=cascade,
            store=url,
            env=env,
        )
        for name in ("A1", "A2")
    )
    sidecars = {"A1": a1, "A2": a2, "B": b}
    start_all(sidecars.values())
    for _ in range(3):
        assert get(a1.url("inbound") + "/a").status_code == 200
    wait_for(lambda: b.cascade()["subscribers"] == 1, "A1 watching B")
    for sidecar in sidecars.values():
        wait_for(lambda s=sidecar: s.cascade()["redis"]["connected"], "redis subscription")
    try:
        yield Replicas(apps, sidecars, url, f"ccb:cascade:{namespace}")
    finally:
        for sidecar in sidecars.values():
            sidecar.stop()
        for instance in apps.values():
            instance.stop()


def _update(version: int) -> dict[str, Any]:
    endpoint = Endpoint("B", "GET", "/b")
    update = AvailabilityUpdate(
        "B",
        endpoint,
        False,
        (Cause(Endpoint.service_wide("Z"), "circuit open"), Cause(endpoint, "requires Z")),
        expires_at=time.time() + 60,
        version=version,
    )
    return update.to_dict()


def test_forged_updates_are_rejected_and_counted(replicas: Replicas) -> None:
    a2 = replicas.sidecars["A2"]
    forged = {**_update(time.time_ns() // 1000), "signature": "00" * 32}
    unsigned = _update(time.time_ns() // 1000 + 1)
    with redis.Redis.from_url(replicas.redis_url) as client:
        client.publish(replicas.channel, b"forger|" + json.dumps(forged).encode())
        client.publish(replicas.channel, b"forger|" + json.dumps(unsigned).encode())
        client.publish(replicas.channel, b"forger|not json")

    def counted() -> bool:
        return (
            a2.metric("ccb_cascade_updates_rejected", reason="bad_signature") >= 1
            and a2.metric("ccb_cascade_updates_rejected", reason="unsigned") >= 1
            and a2.metric("ccb_cascade_updates_rejected", reason="malformed") >= 1
        )

    wait_for(counted, "the forgeries counted at A2")
    assert a2.available("GET /b", upstream="B")
    assert a2.cascade()["unavailable"] == []


def test_an_outside_client_cannot_poison_the_graph(replicas: Replicas) -> None:
    a1, b = replicas.sidecars["A1"], replicas.sidecars["B"]
    seen = len(replicas.apps["A1"].state.seen)
    forged_hop = f"v1.B.{int(time.time())}." + "0" * 32
    headers = {
        "ccb-serving-endpoint": "A GET /evil",
        "ccb-optional": "1",
        "ccb-hop": forged_hop,
    }
    # The app passes every header on: the sidecar must have stripped them before it.
    assert get(a1.url("inbound") + "/naive", headers).status_code == 200
    assert get(b.url("inbound") + "/b", headers).status_code == 200
    received = replicas.apps["A1"].state.seen[seen][1]
    assert not any(name.startswith("ccb-") for name in received)
    assert not any(n.startswith("ccb-") for _, h in replicas.apps["B"].state.seen for n in h)
    assert ("A GET /naive", "B GET /b", True) in a1.edges()  # learned through traceparent
    for sidecar in replicas.sidecars.values():
        assert not any("/evil" in caller for caller, _, _ in sidecar.edges())
    # A forged hop token earns no `ccb-sidecar-grpc` answer (nothing to subscribe to).
    response = get(b.url("inbound") + "/b", {"ccb-hop": forged_hop})
    assert "ccb-sidecar-grpc" not in response.headers


def test_both_replicas_learn(replicas: Replicas) -> None:
    a1, a2, b = (replicas.sidecars[s] for s in ("A1", "A2", "B"))
    assert a2.cascade()["peers"] == {}  # A2 never talked to B
    replicas.apps["Z"].stop()
    for _ in range(2):
        assert get(b.url("inbound") + "/b").status_code == 424
    wait_for(lambda: not a1.available("GET /b", upstream="B"), "A1 learns (Watch)")
    wait_for(lambda: not a2.available("GET /b", upstream="B"), "A2 learns (Redis)")
    chain = [c["endpoint"] for c in a2.availability("GET /b", upstream="B")["causeChain"]]
    assert chain == ["Z * *", "B GET /b"]
    refused = get(a2.url("outbound") + "/B/b")
    assert refused.status_code == 503
    assert refused.headers["ccb-cause"] == "Z * *, B GET /b"
    assert a2.metric("ccb_cascade_refused_early", direction="outbound") >= 1
    assert a2.metric("ccb_cascade_updates_received", via="redis") >= 1
    replicas.apps["Z"].start()
    wait_for(lambda: get(b.url("inbound") + "/b").status_code == 200, "B recovered", 20, 0.2)
    wait_for(lambda: a1.available("GET /b", upstream="B"), "A1 clear")
    wait_for(lambda: a2.available("GET /b", upstream="B"), "A2 clear")
