"""The package as a type checker sees it: what users write under `mypy --strict` checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from mypy import api

pytestmark = pytest.mark.slow

_USER_CODE = """\
from cascadebreaker import CircuitBreaker, RedisStore

def shared(url: str) -> CircuitBreaker:
    store = RedisStore.from_url(url, namespace="shop")
    return CircuitBreaker("payment", store=store)
"""


def test_the_lazily_loaded_redis_store_is_typed_for_users(tmp_path: Path) -> None:
    # RedisStore loads on first use (the redis extra is optional); a checker must still see
    # the class, not `object` (which made `RedisStore.from_url` an error under --strict).
    user = tmp_path / "user.py"
    user.write_text(_USER_CODE)
    out, err, status = api.run(
        ["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"), str(user)]
    )
    assert status == 0, out + err
