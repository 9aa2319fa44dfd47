"""`ccb experiment` machinery on a tiny run: every field of the report is there and sensible."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cascadebreaker.demo.experiment import ExperimentSettings, plan_cases, run_faults
from cascadebreaker.demo.report import CASE_ROWS, write_outputs
from cascadebreaker.demo.topology import Timings

pytestmark = pytest.mark.slow

TINY = ExperimentSettings(
    rate=10.0,
    healthy_s=1.5,
    fault_s=3.0,
    recovered_s=2.0,
    timings=Timings(call_timeout=2.0, failure_threshold=3, recovery_timeout=0.5),
)


def test_courier_outage_case_reports_every_field(tmp_path: Path) -> None:
    results = {"faults": run_faults(TINY, plan_cases(["courier_down"], ["plain"]))}
    write_outputs(results, tmp_path)

    written = json.loads((tmp_path / "results.json").read_text())
    case = written["faults"]["courier_down"]["plain"]
    for key in CASE_ROWS:
        assert key in case, key
    assert case["orders"] == case["ok_orders"] + case["failed_orders"] > 0
    assert case["early_refusals_while_healthy"] == 0
    assert case["phases"]["healthy"]["failed"] == 0
    # Plain breakers: the orders that failed during the outage were compensated.
    assert case["phases"]["fault"]["failed"] > 0
    assert case["compensations"] > 0
    assert case["wasted_reservations"] > 0
    report = (tmp_path / "report.md").read_text()
    assert "## courier_down" in report
    assert "remote_calls_per_failed_order" in report
    for plot in written["plots"]:
        assert (tmp_path / plot).stat().st_size > 0


def test_a_soft_dependency_down_refuses_and_fails_no_order(tmp_path: Path) -> None:
    """Orders fall back without recommendations; nobody marked the call optional, and the
    cascade learns it from the orders that still succeed: 0 refused, 0 failed."""
    cases = plan_cases(["soft_down"], ["cascade"], ["soft_down"])
    results = run_faults(TINY, cases)
    for key in ("soft_down", "soft_down@failure_rate"):
        case = results[key]["cascade"]
        assert case["phases"]["fault"]["ok"] > 0
        assert case["outcome_refused"] == 0
        assert case["outcome_failed"] == 0
        assert case["false_refusals"] == 0
