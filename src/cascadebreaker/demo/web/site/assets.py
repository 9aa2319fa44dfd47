"""The built front end (Vite's output, shipped in the package): where it is and what to load."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import cascadebreaker

ASSETS_DIR = Path(cascadebreaker.__file__).parent / "web" / "demo"
ASSETS_URL = "/static/ccb-demo/"  # Vite's `base` in frontend/demo-web/vite.config.js
ENTRY = "src/main.js"


class AssetsMissing(RuntimeError):
    """The front end was not built into the package (`make assets` builds it)."""


@dataclass(frozen=True)
class Assets:
    """The entry script and stylesheets of the page, and the version Inertia compares."""

    script: str
    styles: tuple[str, ...]
    version: str


@functools.cache
def load(directory: Path = ASSETS_DIR) -> Assets:
    """Read Vite's manifest; the version is its hash, so a rebuilt front end reloads clients."""
    manifest_path = directory / "manifest.json"
    try:
        raw = manifest_path.read_bytes()
        entry = json.loads(raw)[ENTRY]
    except (OSError, ValueError, KeyError) as exc:
        raise AssetsMissing(
            f"the demo page's assets are missing or unreadable ({manifest_path}: {exc}); "
            "build them with `make assets`"
        ) from exc
    return Assets(
        script=ASSETS_URL + entry["file"],
        styles=tuple(ASSETS_URL + css for css in entry.get("css", ())),
        version=hashlib.sha256(raw).hexdigest()[:16],
    )
