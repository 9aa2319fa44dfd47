"""The progress of `ccb experiment`: a rich progress bar on a terminal, plain lines otherwise.

On a terminal: the step running (fault / mode), done of total, elapsed time and the time left
(rich estimates it from the steps done). Not on a terminal (CI logs, a pipe): one timestamped
line per step, as before.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from cascadebreaker.demo.experiment import Case

__all__ = ["ExperimentProgress"]


class ExperimentProgress:
    """Steps of the experiment: every case, then the overhead and worker-pool parts."""

    def __init__(self, steps: int, case_seconds: float, stream: TextIO | None = None) -> None:
        self.steps = steps
        self.case_seconds = case_seconds  # a rough first guess, before any step is done
        self.stream = stream or sys.stdout
        self.done = -1  # steps finished (the first step() makes it 0)
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> ExperimentProgress:
        if self.stream.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("elapsed"),
                TimeElapsedColumn(),
                TextColumn("left"),
                TimeRemainingColumn(),
                console=Console(file=self.stream),
            )
            self._bar.start()
            self._task = self._bar.add_task("starting", total=self.steps)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            if kind is None and self._task is not None:
                self._bar.update(self._task, completed=self.steps, description="done")
            self._bar.stop()

    def case(self, case: Case, index: int) -> None:
        """A fault case begins."""
        policy = "" if case.policy == "consecutive" else f" ({case.policy})"
        self.step(f"{case.fault} / {case.mode}{policy}", self.case_seconds)

    def step(self, description: str, seconds: float = 0.0) -> None:
        """The next step begins (`seconds`: about how long it takes; for the plain lines)."""
        self.done += 1
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=self.done, description=description)
            return
        position = f"{self.done + 1}/{self.steps}"
        print(f"[{time.strftime('%H:%M:%S')}] {position} {description}", file=self.stream)
        self.stream.flush()

    def note(self, message: str) -> None:
        """A detail within the running step."""
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, description=message)
            return
        print(f"[{time.strftime('%H:%M:%S')}]     {message}", file=self.stream, flush=True)
