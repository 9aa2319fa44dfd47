"""`__all__` is the public surface: complete and importable (as httpx checks its own)."""

from __future__ import annotations

import importlib
import types

import pytest

import cascadebreaker

PUBLIC_DUNDERS = {"__version__"}
MODULES = [
    "cascadebreaker",
    "cascadebreaker.integrations.httpx_transport",
    "cascadebreaker.integrations.prometheus",
    "cascadebreaker.integrations.rejection",
    "cascadebreaker.integrations.asgi",
    "cascadebreaker.integrations.inertia",
    "cascadebreaker.integrations.django",
    "cascadebreaker.integrations.routing",
    "cascadebreaker.integrations.requests",
    "cascadebreaker.integrations.aiohttp",
    "cascadebreaker.integrations.grpc",
    "cascadebreaker.integrations.grpc_status",
    "cascadebreaker.integrations.flask",
    "cascadebreaker.integrations.fastapi",
    "cascadebreaker.integrations.celery",
    "cascadebreaker.integrations.opentelemetry",
    "cascadebreaker.integrations.retry",
    "cascadebreaker.integrations.tenacity",
    "cascadebreaker.integrations.stamina",
    "cascadebreaker.logs",
    "cascadebreaker.testing",
]


def public_members(module: types.ModuleType) -> set[str]:
    """Names a user sees in the module: not private, not a submodule, not a typing import."""
    names = set()
    for name, value in vars(module).items():
        if name.startswith("_") and name not in PUBLIC_DUNDERS:
            continue
        if isinstance(value, types.ModuleType) or name == "annotations":
            continue
        defined_here = getattr(value, "__module__", module.__name__)
        if not isinstance(defined_here, str):
            defined_here = module.__name__
        # The package root re-exports its submodules' names; an integration module exports only
        # what it defines (its imports of core names are not part of its surface).
        ours = module.__name__ if "." in module.__name__ else "cascadebreaker"
        if not defined_here.startswith(ours):
            continue
        names.add(name)
    return names


@pytest.mark.parametrize("module_name", MODULES)
def test_all_lists_every_public_member(module_name: str) -> None:
    module = importlib.import_module(module_name)
    missing = public_members(module) - set(module.__all__)
    assert not missing, f"{module_name}: public but not in __all__: {sorted(missing)}"


@pytest.mark.parametrize("module_name", MODULES)
def test_every_name_in_all_is_importable(module_name: str) -> None:
    module = importlib.import_module(module_name)
    for name in module.__all__:
        assert getattr(module, name) is not None, name


@pytest.mark.parametrize("module_name", MODULES)
def test_all_has_no_duplicates(module_name: str) -> None:
    # Order is ruff's job (RUF022); a duplicate would pass ruff and hide a typo.
    names = importlib.import_module(module_name).__all__
    assert len(names) == len(set(names))


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from cascadebreaker import *", namespace)
    namespace.pop("__builtins__")
    assert set(namespace) == set(cascadebreaker.__all__)


def test_the_fixed_public_api_is_exported() -> None:
    for name in ("CircuitBreaker", "State", "CircuitOpenError", "MemoryStore", "RedisStore"):
        assert name in cascadebreaker.__all__


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        _ = cascadebreaker.NoSuchThing  # type: ignore[attr-defined]
