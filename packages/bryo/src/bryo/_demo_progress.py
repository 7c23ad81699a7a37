"""The demo's progress bars, drawn by `rich`, with a rate that excludes compilation.

A jitted step's first call compiles it: counting that call in "steps/s" makes the rate
read 0.4 at the start and climb for the rest of the run. `TrainingProgress` times the
first step on its own (shown as "compile ... s") and computes the rate and the ETA from
the steps after it. On a terminal it draws a live bar with the loss; elsewhere (a pipe,
a log file, CI) and with `--quiet` it draws nothing, and `summary()` gives one line.
"""

from __future__ import annotations

import time
from typing import NamedTuple, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


class StepTimes(NamedTuple):
    """How long a run took: its first step (compilation included) and the steps after."""

    first_step: float
    later: float
    later_steps: int

    @property
    def rate(self) -> float | None:
        """Steps per second after the first step; None while there are none to time."""
        if self.later_steps == 0:
            return None
        return self.later_steps / max(self.later, 1e-9)


class TrainingProgress:
    """A progress bar for `total` steps of a loop whose first step compiles.

    Use as a context manager; call `advance(loss)` after each step (once the step's
    result is ready, e.g. after `float(loss)`).
    """

    def __init__(self, total: int, label: str, stream: TextIO, *, quiet: bool = False) -> None:
        self.total, self.label = total, label
        self.console = Console(file=stream, highlight=False)
        self.live = not quiet and self.console.is_terminal
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"),
            TextColumn("{task.fields[rate]}"),
            TimeRemainingColumn(),
            console=self.console,
            disable=not self.live,
            transient=False,
        )
        self.task = self.progress.add_task(label, total=total, loss="-", rate="compiling")
        self.started = time.perf_counter()
        self.first_done: float | None = None
        self.done = 0
        self.loss: float | None = None

    def __enter__(self) -> TrainingProgress:
        self.progress.start()
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def advance(self, loss: float) -> None:
        """Record one finished step and its loss."""
        now = time.perf_counter()
        self.done += 1
        self.loss = loss
        if self.first_done is None:
            self.first_done = now
        times = self.times(now)
        rate = f"compile {times.first_step:.1f} s"
        if times.rate is not None:
            rate = f"{times.rate:,.1f} steps/s, {rate}"
        # rich's ETA rates the steps after the first sample it saw, so compiling (which
        # ends before the first sample) is left out of it as well.
        self.progress.update(self.task, advance=1, loss=f"{loss:.4f}", rate=rate)

    def times(self, now: float | None = None) -> StepTimes:
        """The first step's time and the later steps' time so far."""
        now = time.perf_counter() if now is None else now
        if self.first_done is None:
            return StepTimes(now - self.started, 0.0, 0)
        return StepTimes(self.first_done - self.started, now - self.first_done, self.done - 1)

    def summary(self) -> str:
        """One line: steps, final loss, compile time and the rate without it."""
        times = self.times()
        loss = "-" if self.loss is None else f"{self.loss:.4f}"
        rate = "" if times.rate is None else f", {times.rate:,.1f} steps/s"
        return (
            f"{self.label.strip()}: {self.done} steps, loss {loss} "
            f"(first step {times.first_step:.1f} s with compilation{rate})"
        )
