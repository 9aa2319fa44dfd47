"""The worker-pool scenario: a hanging upstream kills unrelated routes unless a breaker opens."""

from __future__ import annotations

from pathlib import Path

import pytest

from cascadebreaker.demo.workerpool_scenario import ScenarioSettings, report_rows, run_scenario

pytestmark = pytest.mark.slow

# Twice as many hanging callers as workers; the warm-up covers the first upstream timeouts,
# which no breaker can prevent (it has seen no failure yet).
SETTINGS = ScenarioSettings(
    workers=8,
    upstream_timeout=2.0,
    slow_clients=16,
    other_clients=2,
    other_timeout=1.0,
    warmup=4.0,
    measure=2.5,
    failure_threshold=3,
    recovery_timeout=5.0,
)


async def test_other_route_dies_without_breaker_and_lives_with_one(tmp_path: Path) -> None:
    without, with_breaker = await run_scenario(SETTINGS, tmp_path)

    assert not without.breaker and with_breaker.breaker
    assert without.other_failures > 0
    assert without.routes["/slow-route"].ok == 0  # the upstream never answers
    assert with_breaker.other_failures == 0
    assert with_breaker.routes["/other"].ok > 0
    # The open breaker answered /slow-route at once instead of holding a worker.
    assert with_breaker.routes["/slow-route"].rejected > 0
    rows = report_rows([without, with_breaker])
    assert {(r["variant"], r["route"]) for r in rows} == {
        ("no breaker", "/other"),
        ("no breaker", "/slow-route"),
        ("breaker", "/other"),
        ("breaker", "/slow-route"),
    }
