"""`ccb experiment`'s progress: plain lines off a terminal, a rich progress bar on one."""

from __future__ import annotations

import io

from cascadebreaker.demo.experiment import Case, plan_cases
from cascadebreaker.demo.progress import ExperimentProgress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_when_not_on_a_terminal() -> None:
    out = io.StringIO()
    with ExperimentProgress(3, 20.0, out) as progress:
        progress.case(Case("courier_down", "plain"), 0)
        progress.case(Case("intermittent", "cascade", "failure_rate"), 1)
        progress.note("overhead / 5 orders/s")
        progress.step("worker pool")
    lines = out.getvalue().splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == [
        "1/3 courier_down / plain",
        "2/3 intermittent / cascade (failure_rate)",
        "    overhead / 5 orders/s",
        "3/3 worker pool",
    ]


def test_a_progress_bar_on_a_terminal() -> None:
    out = _Terminal()
    with ExperimentProgress(2, 20.0, out) as progress:
        assert progress._bar is not None
        progress.case(Case("soft_down", "cascade"), 0)
        progress.step("worker pool")
    assert "soft_down" in out.getvalue() or "done" in out.getvalue()


def test_the_plan_runs_failure_rate_cases_in_breaker_modes_only() -> None:
    cases = plan_cases(["courier_down"], ["none", "cascade"], ["intermittent"])
    assert [(c.key, c.mode) for c in cases] == [
        ("courier_down", "none"),
        ("courier_down", "cascade"),
        ("intermittent@failure_rate", "cascade"),
    ]
