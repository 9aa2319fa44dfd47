"""bench.sidecar.coldcost's summary and table (measuring is the bench's)."""

from __future__ import annotations

from bench.sidecar import coldcost

FLOOR = "floor: minimal httptools proxy"


def test_medians_per_proxy_and_state_in_microseconds() -> None:
    rows = coldcost.summarize(
        {
            FLOOR: {"warm": [30e-6, 31e-6, 90e-6], "cold": [50e-6, 52e-6, 51e-6]},
            "sidecar (compiled build)": {"warm": [32e-6, 33e-6], "cold": [60e-6, 70e-6, 80e-6]},
        }
    )
    floor, sidecar = rows
    assert (floor.warm, floor.cold, floor.samples) == (31.0, 51.0, 3)
    assert round(floor.added, 6) == 20.0
    assert (round(sidecar.warm, 6), sidecar.cold, sidecar.samples) == (32.5, 70.0, 2)


def test_table_gives_each_proxy_against_the_floor() -> None:
    rows = [
        coldcost.Row("nginx proxy", 20.0, 25.0, 100),
        coldcost.Row(FLOOR, 30.0, 50.0, 100),
        coldcost.Row("sidecar (compiled build)", 32.0, 70.0, 100),
    ]
    text = "\n".join(coldcost.render(rows, FLOOR, "tree"))
    assert "| sidecar (compiled build) | 32.0 | 70.0 | 38.0 | 100 |" in text
    assert "| sidecar (compiled build) | +2.0 | +20.0 |" in text
    assert "| nginx proxy | -10.0 | -25.0 |" in text
    assert f"| {FLOOR} | +" not in text  # the floor is not compared with itself


def test_without_the_floor_no_comparison() -> None:
    text = coldcost.render([coldcost.Row("nginx proxy", 20.0, 25.0, 10)], FLOOR, "tree")
    assert not any(line.startswith("| above") for line in text)
