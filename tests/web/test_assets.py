"""The demo page's built assets ship in the package and are as new as their sources."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from cascadebreaker.demo.web.site.assets import ASSETS_DIR, ASSETS_URL, ENTRY, AssetsMissing, load

SOURCES = Path(__file__).resolve().parents[2] / "frontend" / "demo-web"


def sources_hash(root: Path) -> str:
    """What frontend/demo-web/vite.config.js stamps into the build (same files, same digest)."""
    files = ["package.json", "package-lock.json", "vite.config.js"]
    files += [p.relative_to(root).as_posix() for p in (root / "src").rglob("*") if p.is_file()]
    digest = hashlib.sha256()
    for name in sorted(files):
        content = hashlib.sha256((root / name).read_bytes()).hexdigest()
        digest.update(f"{name}\n{content}\n".encode())
    return digest.hexdigest()


def test_committed_assets_were_built_from_the_current_sources() -> None:
    stamp = (ASSETS_DIR / "sources.sha256").read_text().strip()
    assert stamp == sources_hash(SOURCES), (
        "src/cascadebreaker/web/demo is older than frontend/demo-web: run `make assets` and "
        "commit the result"
    )


def test_the_manifest_entry_and_its_files_exist() -> None:
    entry = json.loads((ASSETS_DIR / "manifest.json").read_text())[ENTRY]
    for name in [entry["file"], *entry["css"]]:
        assert (ASSETS_DIR / name).is_file(), name
    assets = load()
    assert assets.script == ASSETS_URL + entry["file"]
    assert assets.styles == tuple(ASSETS_URL + css for css in entry["css"])
    assert len(assets.version) == 16


def test_missing_assets_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(AssetsMissing, match="make assets"):
        load(tmp_path)
    (tmp_path / "manifest.json").write_text("{}")
    with pytest.raises(AssetsMissing, match="make assets"):
        load(tmp_path)
