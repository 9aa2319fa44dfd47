"""Fixtures of the pod tier: a network-namespace lab, torn down also on failure."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

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


SIDECAR_UID = 1337  # the image's sidecar user; the pods run the sidecar as it
CHECKOUT = Path(__file__).resolve().parents[2]


def _closed_to_others(path: Path) -> list[Path]:
    """`path` and its ancestors that other users may not traverse."""
    return [d for d in (path, *path.parents) if not d.stat().st_mode & stat.S_IXOTH]


@pytest.fixture(scope="session")
def sidecar_uid_reaches_the_checkout() -> Iterator[None]:
    """Let uid 1337 reach this checkout and its venv for the session (then put modes back).

    A clone inside a private directory (`mktemp -d` makes it 0700) hides the code from the
    sidecar's uid: every sidecar in a pod died with "No module named 'cascadebreaker'".
    Only traversal (o+x) is added, only where it is missing.
    """
    changed: list[tuple[Path, int]] = []
    for top in sorted({CHECKOUT, Path(sys.prefix).resolve()}):
        for directory in _closed_to_others(top):
            mode = stat.S_IMODE(directory.stat().st_mode)
            os.chmod(directory, mode | stat.S_IXOTH)
            changed.append((directory, mode))
    try:
        probe = subprocess.run(
            [
                "setpriv",
                f"--reuid={SIDECAR_UID}",
                f"--regid={SIDECAR_UID}",
                "--clear-groups",
                sys.executable,
                "-c",
                "import cascadebreaker.cli",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if probe.returncode != 0:
            pytest.fail(
                f"uid {SIDECAR_UID} cannot import cascadebreaker from {CHECKOUT}: "
                f"{probe.stderr.strip()[-500:]}"
            )
        yield
    finally:
        for directory, mode in reversed(changed):
            os.chmod(directory, mode)


@pytest.fixture
def lab(sidecar_uid_reaches_the_checkout: None) -> Iterator[Lab]:
    """A fresh lab (node namespace + bridge); pods are added by the test."""
    require_lab_tools()
    sweep_leftovers()
    lab = Lab()
    try:
        lab.start()
        yield lab
    finally:
        lab.close()
