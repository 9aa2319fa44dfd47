"""Fixtures of the pod tier: a network-namespace lab, torn down also on failure."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.pods.netlab import Lab, missing_tools, sweep_leftovers


def require_lab_tools() -> None:
    """Fail under CI, skip elsewhere, when the machine cannot run namespace pods."""
    missing = missing_tools()
    if missing:
        message = f"pod tests need {', '.join(missing)}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}; CI must not skip them (see .ci/run)")
        pytest.skip(message)


@pytest.fixture
def lab() -> Iterator[Lab]:
    """A fresh lab (node namespace + bridge); pods are added by the test."""
    require_lab_tools()
    sweep_leftovers()
    lab = Lab()
    try:
        lab.start()
        yield lab
    finally:
        lab.close()
