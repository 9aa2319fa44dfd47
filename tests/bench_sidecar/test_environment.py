"""The run's header: what the numbers were measured on, with a yardstick for other machines."""

from __future__ import annotations

import re
from pathlib import Path

from bench.sidecar import run


def test_the_header_names_the_cpu_and_the_interpreters_speed() -> None:
    env = run.environment(3, 3.0, 0.5)
    assert re.fullmatch(r"\S+, \d+ CPUs \(.+\), \S+ \S+", env["machine"])
    speed = re.search(r"; ([0-9.]+) µs per sum\(range\(1000\)\)$", env["python"])
    assert speed is not None, env["python"]
    assert 0.1 < float(speed.group(1)) < 10_000
    assert env["load average before the run"] == "0.50"


def _cache(root: Path, index: int, level: int, size: str) -> None:
    (root / f"index{index}").mkdir(parents=True)
    (root / f"index{index}" / "level").write_text(f"{level}\n")
    (root / f"index{index}" / "size").write_text(f"{size}\n")


def test_the_cpu_kind_names_family_model_and_caches(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\n\n"
        "processor\t: 1\ncpu family\t: 99\nmodel\t\t: 99\n"
    )
    caches = tmp_path / "cache"
    for index, level, size in ((0, 1, "32K"), (1, 1, "32K"), (2, 2, "1024K"), (3, 3, "32768K")):
        _cache(caches, index, level, size)
    assert run.cpu_kind(cpuinfo, caches) == "; family 25 model 17; L2 1 MiB, L3 32 MiB"


def test_the_cpu_kind_says_what_it_can_read(tmp_path: Path) -> None:
    caches = tmp_path / "cache"
    _cache(caches, 0, 2, "512K")
    assert run.cpu_kind(tmp_path / "absent", caches) == "; L2 512 KiB"
    assert run.cpu_kind(tmp_path / "absent", tmp_path / "none") == ""


def test_the_machine_line_carries_the_cpu_kind_on_this_machine() -> None:
    kind = run.cpu_kind()
    assert kind.startswith("; family ")  # Linux on x86-64, as CI runs it
    assert run.environment(3, 3.0, 0.5)["machine"].count(kind) == 1
