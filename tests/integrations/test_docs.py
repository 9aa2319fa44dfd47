"""Every Python block in docs/integrations.md runs (in a fresh interpreter) unless marked."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import Upstream

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def blocks() -> list[tuple[str, str]]:
    """(id, code) of each runnable block: the nearest heading above it names it."""
    text = DOC.read_text()
    found = []
    for match in BLOCK.finditer(text):
        code = match.group(1)
        if code.startswith("# fragment"):
            continue
        headings = re.findall(r"^## (.+)$", text[: match.start()], re.M)
        title = re.sub(r"\W+", "-", headings[-1].split("(")[0].strip().lower()).strip("-")
        found.append((f"{title}-{len(found)}", code))
    return found


def test_the_doc_has_runnable_examples_and_fragments() -> None:
    text = DOC.read_text()
    assert len(blocks()) >= 10
    assert "# fragment" in text


@pytest.mark.parametrize(("name", "code"), blocks(), ids=[name for name, _ in blocks()])
def test_example_runs(name: str, code: str, upstream: Upstream, dead_url: str) -> None:
    dead = dead_url.removeprefix("http://").rstrip("/")
    prelude = f"UPSTREAM = {upstream.url('')!r}\nDEAD = {dead!r}\n"
    result = subprocess.run(
        [sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"{name}:\n{result.stdout}\n{result.stderr}"
