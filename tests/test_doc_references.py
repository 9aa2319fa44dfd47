"""Every reference from one document to another still lands: a section named in quotes
(`docs/sidecar.md, "Compiled build"`) is a heading of that document, and a relative link
(`[x](sidecar.md#code-map)`) names a file that exists and, with an anchor, one of its headings.
Sections move between documents; these references are how a reader follows them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# `docs/NAME.md, "Section"` or `NAME.md, "Section"`; the quote may wrap onto the next line.
NAMED_SECTION = re.compile(r'(?:docs/)?([\w-]+)\.md,\s+"([^"]+)"')
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+)$", re.M)
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def prose(doc: Path) -> str:
    """The document without its code blocks (a `# comment` in a block is not a heading)."""
    return FENCE.sub("", doc.read_text())


def headings(doc: Path) -> list[str]:
    return [" ".join(h.split()) for h in HEADING.findall(prose(doc))]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.lower().replace("`", ""))
    return text.replace(" ", "-")


def document(name: str) -> Path:
    return ROOT / "README.md" if name == "README" else ROOT / "docs" / f"{name}.md"


def names_a_heading(name: str, doc: Path) -> bool:
    """A reference may shorten a heading to its words before a parenthesis or colon
    ("Compiled build" for "Compiled build (opt-in, mypyc)")."""
    return any(h == name or h.startswith((f"{name} (", f"{name}:")) for h in headings(doc))


def named_sections() -> list[tuple[str, str, str]]:
    found = []
    for doc in DOCS:
        for match in NAMED_SECTION.finditer(prose(doc)):
            found.append((doc.name, match.group(1), " ".join(match.group(2).split())))
    return found


def links() -> list[tuple[Path, str]]:
    found = []
    for doc in DOCS:
        for match in LINK.finditer(prose(doc)):
            target = match.group(1)
            if not re.match(r"[a-z]+:", target):  # http:, https:, mailto: are not ours to check
                found.append((doc, target))
    return found


def test_the_documents_reference_each_other() -> None:
    assert len(named_sections()) >= 20
    assert len(links()) >= 20


@pytest.mark.parametrize(("source", "target", "section"), named_sections())
def test_a_named_section_is_a_heading_of_its_document(
    source: str, target: str, section: str
) -> None:
    doc = document(target)
    assert doc.exists(), f"{source} names {target}.md, which does not exist"
    assert names_a_heading(section, doc), f'{source} names "{section}", not a heading of {doc.name}'


@pytest.mark.parametrize(("source", "target"), links(), ids=[f"{d.name}->{t}" for d, t in links()])
def test_a_relative_link_lands(source: Path, target: str) -> None:
    path, _, anchor = target.partition("#")
    doc = (source.parent / path).resolve() if path else source
    assert doc.exists(), f"{source.name} links {target}: no such file"
    if anchor and doc.suffix == ".md":
        assert anchor in {slug(h) for h in headings(doc)}, (
            f"{source.name} links {target}: no such heading"
        )


def test_the_slug_is_githubs() -> None:
    assert slug("The call pipeline") == "the-call-pipeline"
    assert slug("Compiled build (opt-in, mypyc)") == "compiled-build-opt-in-mypyc"
    assert slug("Hook points (for the cascade)") == "hook-points-for-the-cascade"
