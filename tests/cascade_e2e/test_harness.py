"""The harness itself: a sidecar that fails to start takes its siblings down with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import app, make_sidecar, start_all

pytestmark = pytest.mark.slow


def test_a_failed_start_stops_every_sidecar_it_spawned(tmp_path: Path) -> None:
    a_app, b_app = app("A", {}), app("B", {})
    a = make_sidecar(tmp_path, "A", a_app, {})
    b = make_sidecar(tmp_path, "B", b_app, {})
    try:
        b.config["upstreams"] = {"C": {"url": "not a url"}}  # invalid: B exits at start
        with pytest.raises(RuntimeError, match="sidecar B"):
            start_all([a, b])
        assert a.process is not None and a.process.poll() is not None  # not leaked
    finally:
        a.stop()
        b.stop()
        a_app.stop()
        b_app.stop()
