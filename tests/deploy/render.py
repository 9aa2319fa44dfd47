"""Rendering the Kustomize tree with `kubectl kustomize` (offline)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
OVERLAYS = ("overlays/checkout", "overlays/shop", "injector")


def require_kubectl() -> str:
    """kubectl's path; under CI a missing kubectl fails the test instead of skipping it."""
    binary = shutil.which("kubectl")
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("kubectl is not installed; CI must not skip the manifest tests")
        pytest.skip("kubectl is not installed")
    return binary


def kustomize(directory: str) -> list[dict[str, Any]]:
    """The objects `kubectl kustomize deploy/kubernetes/<directory>` renders."""
    done = subprocess.run(
        [require_kubectl(), "kustomize", str(KUBE / directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]
