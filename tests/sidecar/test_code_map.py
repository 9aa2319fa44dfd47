"""docs/sidecar.md's code map names every module of the sidecar package, so a newcomer who
reads it finds each file (and a module added without a line there fails here)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "cascadebreaker" / "sidecar"
# Folders the map names as one entry (generated code, the schema's models).
AS_FOLDER = ("grpc/proto_gen/", "schema/")


def _code_map() -> str:
    text = (ROOT / "docs" / "sidecar.md").read_text()
    start = text.index("\n## Code map\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def test_every_module_of_the_sidecar_is_in_the_code_map() -> None:
    code_map = _code_map()
    modules = sorted(
        p.relative_to(PACKAGE).as_posix()
        for p in PACKAGE.rglob("*.py")
        if p.name != "__init__.py" or p.parent == PACKAGE
    )
    assert len(modules) > 40
    missing = [
        m
        for m in modules
        if m != "__init__.py" and not m.startswith(AS_FOLDER) and f"`{m}`" not in code_map
    ]
    assert missing == []
    for folder in AS_FOLDER:
        assert f"`{folder}`" in code_map


def test_the_code_map_names_no_module_that_is_gone() -> None:
    code_map = _code_map()
    named = {
        cell.strip().strip("`")
        for line in code_map.splitlines()
        if line.startswith("| `")
        for cell in line.split("|")[1].split(", ")
    }
    gone = sorted(n for n in named if not (PACKAGE / n).exists())
    assert gone == []
