"""Fixtures for the testing-helpers tier."""

from __future__ import annotations

import pytest

from cascadebreaker.testing import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
