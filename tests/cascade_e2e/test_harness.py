"""The harness itself: a sidecar that fails to start takes its siblings down with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import app, make_sidecar, start_all

pytestmark = pytest.mark.slow


def test_a_failed_start_stops_every_sidecar_it_spawned(tmp_path: Path) -> None:
    a_app, b_app = app("A", {}), app("B", {})
    try:
        a = make_sidecar(tmp_path, "A", a_app, {})
        b = make_sidecar(tmp_path, "B", b_app, {})
        b.ports["admin"] = a.ports["admin"]  # a port collision: B exits at start
        b.config["listen"]["admin"] = a.config["listen"]["admin"]
        with pytest.raises(RuntimeError, match="sidecar B"):
            start_all([a, b])
        assert a.process is not None and a.process.poll() is not None  # not leaked
    finally:
        a_app.stop()
        b_app.stop()
