"""`ccb`: commands load only their own part of the package."""

from __future__ import annotations

import subprocess
import sys

from cascadebreaker.cli import build_parser, main


def test_every_command_is_listed_in_help() -> None:
    help_text = build_parser().format_help()
    for command in ("showcase", "sidecar", "demo", "experiment", "fault"):
        assert command in help_text


def test_sidecar_command_does_not_load_the_demo() -> None:
    code = (
        "import sys; from cascadebreaker.cli import build_parser; build_parser('sidecar');"
        "loaded = [m for m in ('cascadebreaker.demo', 'rich', 'fastapi', 'matplotlib')"
        " if m in sys.modules]; print(loaded); sys.exit(1 if loaded else 0)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


def test_no_command_prints_help_and_exits_2(capsys: object) -> None:
    assert main([]) == 2
