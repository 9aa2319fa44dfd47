"""Rerouting: while the primary upstream is unavailable, calls go to its alternative.

R GET /r → P GET /p   (cascade.alternatives: {P: P2})
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .apps import App, Call
from .conftest import Sidecar, app, get, make_sidecar, start_all, wait_for


@dataclass
class Rerouted:
    apps: dict[str, App]
    sidecar: Sidecar


@pytest.fixture(scope="module")
def rerouted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rerouted]:
    workdir: Path = tmp_path_factory.mktemp("reroute")
    apps = {
        "R": app("R", {"/r": [Call("P", "/p")]}),
        "P": app("P", {"/p": []}),
        "P2": app("P2", {"/p": []}),
    }
    breaker = {"failure_threshold": 2, "recovery_timeout": 30}
    sidecar = make_sidecar(
        workdir,
        "R",
        apps["R"],
        {"P": {"url": apps["P"].url, "breaker": breaker}, "P2": {"url": apps["P2"].url}},
        cascade={"alternatives": {"P": "P2"}},
    )
    start_all([sidecar])
    try:
        yield Rerouted(apps, sidecar)
    finally:
        sidecar.stop()
        for instance in apps.values():
            instance.stop()


def test_calls_go_to_the_alternative_while_the_primary_is_open(rerouted: Rerouted) -> None:
    r = rerouted.sidecar.url("inbound")
    assert get(r + "/r").status_code == 200
    assert len(rerouted.apps["P"].state.seen) == 1
    assert rerouted.apps["P2"].state.seen == []
    rerouted.apps["P"].stop()
    wait_for(lambda: get(r + "/r").status_code == 200, "rerouted to P2")
    served = len(rerouted.apps["P2"].state.seen)
    assert served >= 1
    for _ in range(5):
        assert get(r + "/r").status_code == 200
    assert len(rerouted.apps["P2"].state.seen) == served + 5
    # The edge to an upstream with an alternative is optional: R stays available.
    assert rerouted.sidecar.available("GET /r")
    assert rerouted.sidecar.refused_early() == 0
