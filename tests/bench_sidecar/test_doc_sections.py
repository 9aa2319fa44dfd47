"""Rewriting one generated section of docs/benchmarks.md keeps the hand-written history under it."""

from __future__ import annotations

from pathlib import Path

from bench.core.report import write_section

DOC = """# Benchmarks

## Sidecar: instructions per gRPC Call

old table

### The compiled Call (2026-12-01)

history that no run writes

## Sidecar: the compiled build

kept
"""


def test_a_section_without_subsections_leaves_the_ones_below_it(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(DOC)
    write_section(doc, "## Sidecar: instructions per gRPC Call\n\nnew table\n", GRPC)
    text = doc.read_text()
    assert "new table" in text and "old table" not in text
    assert "### The compiled Call (2026-12-01)\n\nhistory that no run writes" in text
    assert text.index("new table") < text.index("### The compiled Call")
    assert text.endswith("## Sidecar: the compiled build\n\nkept\n")


def test_a_section_with_subsections_replaces_its_own(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(DOC)
    write_section(doc, f"{GRPC}\n\nnew table\n\n### Detail\n\nnew detail\n", GRPC)
    text = doc.read_text()
    assert "history that no run writes" not in text and "new detail" in text
    assert text.endswith("## Sidecar: the compiled build\n\nkept\n")


GRPC = "## Sidecar: instructions per gRPC Call"
