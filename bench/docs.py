"""Rewrite one `## ` section of a markdown file in docs/ (benchmarks keep their latest table)."""

from __future__ import annotations

from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"


def replace_section(doc: Path, heading: str, body: str, title: str) -> None:
    """Replace the section starting at the line `heading` (up to the next `## `), or append it;
    a missing file starts with `# title`."""
    section = f"{heading}\n\n{body.strip()}\n"
    if not doc.exists():
        doc.parent.mkdir(parents=True, exist_ok=True)
        doc.write_text(f"# {title}\n\n{section}")
        return
    lines = doc.read_text().splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == heading), None)
    if start is None:
        doc.write_text("".join(lines).rstrip("\n") + "\n\n" + section)
        return
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    tail = "".join(lines[end:])
    doc.write_text("".join(lines[:start]) + section + ("\n" + tail if tail else ""))
