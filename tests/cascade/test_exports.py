"""The package's public surface is complete and importable."""

from __future__ import annotations

import importlib

import cascadebreaker.cascade as cascade

MODULES = ["availability", "endpoints", "graph", "learning", "trace", "trust", "updates"]


def test_every_exported_name_exists() -> None:
    for name in cascade.__all__:
        assert hasattr(cascade, name), name


def test_submodule_public_names_are_reexported() -> None:
    for module_name in MODULES:
        module = importlib.import_module(f"cascadebreaker.cascade.{module_name}")
        missing = set(module.__all__) - set(cascade.__all__)
        # Internal-only constants stay in their modules.
        assert missing <= {
            "ANY",
            "OVERFLOW_TEMPLATE",
            "TRACE_HEADERS",
            "chain_from_list",
            "chain_to_list",
        }, (
            module_name,
            missing,
        )
