"""Fixtures for the pure cascade tests."""

from __future__ import annotations

import pytest

from .helpers import FakeClock, Mesh


@pytest.fixture
def clock() -> FakeClock:
    """A clock that moves only when the test advances it."""
    return FakeClock()


@pytest.fixture
def mesh(clock: FakeClock) -> Mesh:
    """Tables that deliver updates to each other, signed with a shared secret."""
    return Mesh(clock, secret=b"test-secret")
