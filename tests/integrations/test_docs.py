"""Every Python block in README.md and docs/*.md runs (in a fresh interpreter, from the repo's
root) unless its first line is a `# fragment` marker saying why not; every YAML block loads with
the sidecar's config loader (a section is merged into a minimal config) unless so marked."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from cascadebreaker.sidecar.schema import parse_config

from .conftest import Upstream

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "integrations.md"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FRAGMENT = "# fragment"
# A YAML block that is a section only is merged into this (upstreams the docs' examples name).
BASE_CONFIG: dict[str, Any] = {
    "service": "checkout",
    "app": "http://127.0.0.1:8000",
    "upstreams": {
        name: {"url": "http://127.0.0.1:9001"} for name in ("payment", "payment-backup", "mailer")
    },
}


def blocks(language: str = "python", docs: list[Path] = DOCS) -> list[tuple[str, str]]:
    """(id, text) of each block in `language` not marked as a fragment: the document and the
    nearest heading above it name it."""
    pattern = re.compile(rf"^```{language}\n(.*?)^```", re.S | re.M)
    found = []
    for doc in docs:
        text = doc.read_text()
        for match in pattern.finditer(text):
            code = match.group(1)
            if code.startswith(FRAGMENT):
                continue
            headings = re.findall(r"^##? (.+)$", text[: match.start()], re.M) or [doc.stem]
            title = re.sub(r"\W+", "-", headings[-1].split("(")[0].strip().lower()).strip("-")
            found.append((f"{doc.stem}-{title}-{len(found)}", code))
    return found


def test_the_doc_has_runnable_examples_and_fragments() -> None:
    assert len(blocks(docs=[DOC])) >= 10
    assert FRAGMENT in DOC.read_text()


@pytest.mark.parametrize("doc", DOCS, ids=[doc.name for doc in DOCS])
def test_every_python_block_runs_or_says_why_not(doc: Path) -> None:
    """A block either runs (test_example_runs) or starts with `# fragment: why`."""
    for match in re.finditer(r"^```python\n(.*?)^```", doc.read_text(), re.S | re.M):
        first = match.group(1).partition("\n")[0]
        assert not first.startswith(FRAGMENT) or len(first) > len(FRAGMENT) + 3, (
            f"{doc.name}: say why a block is a fragment ({first!r})"
        )


@pytest.mark.parametrize(("name", "code"), blocks(), ids=[name for name, _ in blocks()])
def test_example_runs(name: str, code: str, upstream: Upstream, dead_url: str) -> None:
    dead = dead_url.removeprefix("http://").rstrip("/")
    prelude = f"UPSTREAM = {upstream.url('')!r}\nDEAD = {dead!r}\n"
    result = subprocess.run(
        [sys.executable, "-c", prelude + code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, f"{name}:\n{result.stdout}\n{result.stderr}"


@pytest.mark.parametrize(("name", "text"), blocks("yaml"), ids=[n for n, _ in blocks("yaml")])
def test_yaml_block_loads_with_the_sidecar_config_loader(name: str, text: str) -> None:
    data = yaml.safe_load(text)
    assert isinstance(data, dict), name
    parse_config({**BASE_CONFIG, **data})


def test_the_readme_names_the_proxy_variable_curl_reads() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "http_proxy" in readme and "HTTP_PROXY" not in readme.replace("`HTTP_PROXY`", "")
