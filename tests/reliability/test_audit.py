"""scripts/audit reads pip-audit's JSON: it fails on a vulnerability and says so loudly when
nothing could be audited (never a silent pass)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "audit"


def _audit() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("ccb_scripts_audit", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_a_known_vulnerability_fails() -> None:
    code, lines = _audit().judge(
        [
            {
                "name": "grpcio",
                "version": "1.0",
                "vulns": [{"id": "GHSA-x", "fix_versions": ["2"]}],
            },
            {"name": "redis", "version": "5.0", "vulns": []},
            {"name": "local-thing", "skip_reason": "Dependency not found on PyPI"},
        ]
    )
    assert code == 1
    assert "grpcio 1.0: GHSA-x (fixed in 2)" in lines
    assert "1 packages not audited (not on PyPI?): local-thing" in lines
    assert lines[-1].startswith("2 packages audited, 1 known vulnerabilities")


def test_a_clean_set_passes() -> None:
    code, lines = _audit().judge([{"name": "redis", "version": "5.0", "vulns": []}])
    assert code == 0
    assert lines == ["1 packages audited, 0 known vulnerabilities, 0 ignored with a reason"]


def test_nothing_audited_is_said_loudly_and_does_not_fail() -> None:
    code, lines = _audit().judge(
        [{"name": n, "skip_reason": f"Dependency not found on PyPI: {n}"} for n in ("a", "b")]
    )
    assert code == 0
    assert lines[0].startswith("NOT AUDITED: the advisory service answered for none of the 2")
