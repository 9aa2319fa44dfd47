"""Refusals are not failures: a sidecar's 503 refusal never trips the caller's breaker.

    A GET /a → B GET /b   → C GET /c                 B's cascade refuses /b while C is down
    A GET /r → B GET /relay → C GET /c (optional)    B's app relays its breaker's refusal
    A GET /f → F                                     a plain upstream forging `ccb-refusal`

C is a plain app (killed in the tests); B's breaker for C opens after two failures. B runs no
gRPC listener, so A is never told B's endpoints are unavailable: every call reaches B and B's
refusals reach A's breaker for B, which must stay CLOSED. Run without and with a mesh secret.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from .apps import App, Call
from .conftest import Sidecar, app, free_port, get, make_sidecar, start_all, wait_for

pytestmark = pytest.mark.slow

SECRET = "refusal-test-secret"
THRESHOLD = 2


class _Forger(BaseHTTPRequestHandler):
    """A plain upstream (no sidecar) that answers every request 503 with a forged mark."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(503)
        self.send_header("ccb-refusal", "circuit_open -")
        self.send_header("content-length", "0")
        self.end_headers()


@dataclass
class Mesh:
    apps: dict[str, App]
    a: Sidecar
    b: Sidecar
    secret: str | None

    def breaker(self, upstream: str) -> dict[str, Any]:
        result: dict[str, Any] = self.a.status()["breakers"][upstream]
        return result


@pytest.fixture(scope="module", params=[None, SECRET], ids=["no-secret", "secret"])
def mesh(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Mesh]:
    secret: str | None = request.param
    workdir: Path = tmp_path_factory.mktemp("refusals")
    forger = ThreadingHTTPServer(("127.0.0.1", free_port()), _Forger)
    threading.Thread(target=forger.serve_forever, args=(0.05,), daemon=True).start()
    apps = {
        "A": app(
            "A",
            {"/a": [Call("B", "/b")], "/r": [Call("B", "/relay")], "/f": [Call("F", "/f")]},
        ),
        "B": app(
            "B", {"/b": [Call("C", "/c")], "/relay": [Call("C", "/c", optional=True, relay=True)]}
        ),
        "C": app("C", {"/c": []}),
    }
    env = {"CCB_SECRET": secret} if secret else {}
    tight = {"failure_threshold": THRESHOLD, "recovery_timeout": 60}
    b = make_sidecar(
        workdir,
        "B",
        apps["B"],
        {"C": {"url": apps["C"].url, "breaker": tight}},
        cascade={"optionality": {"trickle_interval": 0}},  # B refuses every /b while C is down
        env=env,
    )
    b.config["listen"]["grpc"] = None  # nothing for A to watch: B's refusals reach A's breaker
    a = make_sidecar(
        workdir,
        "A",
        apps["A"],
        {
            "B": {"url": b.url("inbound"), "breaker": tight},
            "F": {"url": f"http://127.0.0.1:{forger.server_address[1]}", "breaker": tight},
        },
        env=env,
    )
    start_all([a, b])
    try:
        for _ in range(3):  # B learns /b -> C (required) and /relay -> C (optional)
            assert get(a.url("inbound") + "/a").status_code == 200
            assert get(a.url("inbound") + "/r").status_code == 200
        yield Mesh(apps, a, b, secret)
    finally:
        for sidecar in (a, b):
            sidecar.stop()
        for instance in apps.values():
            instance.stop()
        forger.shutdown()
        forger.server_close()


def _trip_b(mesh: Mesh) -> None:
    """Kill C and open B's breaker for it."""
    mesh.apps["C"].stop()
    for _ in range(THRESHOLD):
        assert get(mesh.b.url("inbound") + "/relay").status_code == 502
    wait_for(lambda: not mesh.b.available("GET /b"), "B GET /b unavailable at B")


def test_downstream_refusals_never_open_the_callers_breaker(mesh: Mesh) -> None:
    _trip_b(mesh)
    for _ in range(4 * THRESHOLD):
        # B's cascade refuses /b (503 + ccb-refusal), A's app answers 424.
        answer = get(mesh.a.url("inbound") + "/a")
        assert answer.status_code == 424, answer.text
        # B's app relays its breaker's refusal; B's sidecar re-seals it for A.
        assert get(mesh.a.url("inbound") + "/r").status_code == 424
    breaker = mesh.breaker("B")
    assert breaker["state"] == "CLOSED"
    assert breaker["calls"]["refused_upstream"] == 8 * THRESHOLD
    assert breaker["calls"]["failure_status"] == 0
    # What A's app sees: the refusal, marked for the caller's sidecar.
    direct = get(mesh.a.url("outbound") + "/B/relay")
    assert direct.status_code == 503
    code, mark = direct.headers["ccb-refusal"].split(" ")
    assert code == "circuit_open"
    assert (mark == "-") == (mesh.secret is None)
    refused = get(mesh.a.url("outbound") + "/B/b")
    assert refused.status_code == 503
    assert refused.headers["ccb-refusal"].startswith("endpoint_unavailable ")
    assert mesh.breaker("B")["state"] == "CLOSED"


def test_a_forged_refusal_mark_is_honoured_only_without_a_secret_on_loopback(mesh: Mesh) -> None:
    for _ in range(2 * THRESHOLD):
        assert get(mesh.a.url("inbound") + "/f").status_code in (424, 503)
    state = mesh.breaker("F")["state"]
    if mesh.secret is None:
        # Documented trust: without a secret, a loopback upstream's mark is believed.
        assert state == "CLOSED"
    else:
        # With a secret, an unsealed mark is a plain 503: a failure.
        assert state == "OPEN"
