"""Upstream failures through a real sidecar: 504, 502, breaker trips, retries, recovery."""

from __future__ import annotations

from typing import Any

import httpx

from .conftest import SidecarProcess, Upstream, free_port


def test_hanging_upstream_gets_504_and_a_recorded_failure(
    sidecar_factory: Any, upstream: Upstream
) -> None:
    sidecar: SidecarProcess = sidecar_factory({"payment": {"url": upstream.url, "timeout": 0.3}})
    response = httpx.get(sidecar.url("outbound") + "/payment/hang", timeout=10)
    assert response.status_code == 504
    body = response.json()
    assert body["error"] == "upstream timeout"
    assert body["upstream"] == "payment"
    status = sidecar.status()
    assert status["breakers"]["payment"]["calls"]["timeout"] == 1
    # The process lives on and the next call works.
    upstream.state.release.set()
    assert httpx.get(sidecar.url("outbound") + "/payment/ok", timeout=10).status_code == 200


def test_stalled_body_is_cut_after_the_timeout(sidecar_factory: Any, upstream: Upstream) -> None:
    sidecar: SidecarProcess = sidecar_factory({"payment": {"url": upstream.url, "timeout": 0.3}})
    # The head and a first chunk arrive, then the upstream stalls: the client sees a cut body.
    try:
        with httpx.stream("GET", sidecar.url("outbound") + "/payment/stream", timeout=10) as r:
            assert r.status_code == 200
            received = b"".join(r.iter_raw())
        cut = not received.endswith(b"chunk 2\n")
    except httpx.HTTPError:
        cut = True
    assert cut
    assert sidecar.status()["breakers"]["payment"]["calls"]["reset"] == 1


def test_refused_connection_gets_502_and_a_recorded_failure(sidecar_factory: Any) -> None:
    dead = free_port()
    sidecar: SidecarProcess = sidecar_factory(
        {"ledger": {"url": f"http://127.0.0.1:{dead}", "timeout": 1}}
    )
    response = httpx.get(sidecar.url("outbound") + "/ledger/v1/entries", timeout=10)
    assert response.status_code == 502
    assert response.json()["error"] == "upstream unreachable"
    assert response.json()["upstream"] == "ledger"
    assert sidecar.status()["breakers"]["ledger"]["calls"]["connect"] == 1


def test_breaker_trips_and_rejects_with_503_json(sidecar_factory: Any, upstream: Upstream) -> None:
    sidecar: SidecarProcess = sidecar_factory(
        {
            "payment": {
                "url": upstream.url,
                "timeout": 2,
                "breaker": {"failure_threshold": 3, "recovery_timeout": 30},
            }
        }
    )
    outbound = sidecar.url("outbound")
    with httpx.Client(timeout=10) as client:
        for _ in range(3):
            assert client.get(outbound + "/payment/status/503").status_code == 503
        seen_before = len(upstream.state.requests)
        rejected = client.get(outbound + "/payment/status/200")
    assert rejected.status_code == 503
    body = rejected.json()
    assert body["error"] == "circuit open"
    assert body["upstream"] == "payment"
    assert body["circuitState"] == "OPEN"
    assert body["reasonCode"] == "circuit_open"
    # The cause chain is rooted at the open breaker, as Check and /availability report it.
    assert body["causeChain"] == [{"endpoint": "payment * *", "reason": "circuit_open"}]
    assert 0 < body["retryAfter"] <= 30
    assert 1 <= int(rejected.headers["retry-after"]) <= 30
    assert len(upstream.state.requests) == seen_before  # never reached the upstream
    status = sidecar.status()["breakers"]["payment"]
    assert status["state"] == "OPEN"
    assert 0 < status["retryAfter"] <= 30 and "retry_after" not in status  # one spelling
    assert status["calls"]["rejected"] == 1
    metrics = httpx.get(sidecar.url("admin") + "/metrics").text
    assert 'ccb_sidecar_breaker_state{state="open",upstream="payment"} 1.0' in metrics
    assert 'ccb_sidecar_rejections_total{direction="outbound",upstream="payment"} 1.0' in metrics


def test_breaker_on_refused_connections(sidecar_factory: Any) -> None:
    dead = free_port()
    sidecar: SidecarProcess = sidecar_factory(
        {"ledger": {"url": f"http://127.0.0.1:{dead}", "breaker": {"failure_threshold": 2}}}
    )
    with httpx.Client(timeout=10) as client:
        codes = [client.get(sidecar.url("outbound") + "/ledger/x").status_code for _ in range(4)]
    assert codes == [502, 502, 503, 503]


def test_4xx_can_be_configured_as_failures(sidecar_factory: Any, upstream: Upstream) -> None:
    sidecar: SidecarProcess = sidecar_factory(
        {
            "payment": {
                "url": upstream.url,
                "failure_statuses": ["5xx", 429],
                "breaker": {"failure_threshold": 2},
            }
        }
    )
    with httpx.Client(timeout=10) as client:
        codes = [
            client.get(sidecar.url("outbound") + "/payment/status/429").status_code
            for _ in range(3)
        ]
    assert codes == [429, 429, 503]


def test_retries_replay_idempotent_failures(sidecar_factory: Any, upstream: Upstream) -> None:
    sidecar: SidecarProcess = sidecar_factory(
        {
            "payment": {
                "url": upstream.url,
                "retries": {"attempts": 2},
                "breaker": {"failure_threshold": 100},
            }
        }
    )
    response = httpx.get(sidecar.url("outbound") + "/payment/status/503", timeout=10)
    assert response.status_code == 503
    assert len(upstream.state.requests) == 3  # the call and two retries
    calls = sidecar.status()["breakers"]["payment"]["calls"]
    assert calls["failure_status"] == 3


def test_retries_are_off_by_default(sidecar_factory: Any, upstream: Upstream) -> None:
    sidecar: SidecarProcess = sidecar_factory({"payment": {"url": upstream.url}})
    httpx.get(sidecar.url("outbound") + "/payment/status/503", timeout=10)
    assert len(upstream.state.requests) == 1


def test_post_is_never_retried(sidecar_factory: Any, upstream: Upstream) -> None:
    sidecar: SidecarProcess = sidecar_factory(
        {
            "payment": {
                "url": upstream.url,
                "retries": {"attempts": 2},
                "breaker": {"failure_threshold": 100},
            }
        }
    )
    response = httpx.post(sidecar.url("outbound") + "/payment/status/503", timeout=10)
    assert response.status_code == 503
    assert len(upstream.state.requests) == 1
