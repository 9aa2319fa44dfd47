"""docs/frontend.md: every Python block runs, unless it says it is a fragment."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "frontend.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def test_the_doc_has_runnable_blocks() -> None:
    assert [b for b in BLOCKS if not b.startswith("# fragment")]


@pytest.mark.parametrize("block", [b for b in BLOCKS if not b.startswith("# fragment")])
def test_python_block_runs(block: str) -> None:
    exec(compile(block, str(DOC), "exec"), {"__name__": "docs_frontend"})
