"""The demo's progress bar: compile time kept out of the rate, quiet off a terminal."""

import io

from rich.console import Console

from bryo._demo_progress import StepTimes, TrainingProgress


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_rate_leaves_the_first_step_out():
    times = StepTimes(first_step=10.0, later=2.0, later_steps=4)
    assert times.rate == 2.0
    assert StepTimes(first_step=3.0, later=0.0, later_steps=0).rate is None


def test_quiet_off_a_terminal_draws_nothing_and_summarises():
    stream = io.StringIO()
    with TrainingProgress(3, "train", stream) as progress:
        for loss in (0.5, 0.25, 0.125):
            progress.advance(loss)
    assert stream.getvalue() == ""
    summary = progress.summary()
    assert summary.startswith("train: 3 steps, loss 0.1250 (first step ")
    assert "with compilation, " in summary and summary.endswith(" steps/s)")


def test_a_terminal_gets_the_bar_with_loss_and_rate(monkeypatch):
    monkeypatch.setattr(Console, "is_terminal", property(lambda self: True))
    stream = FakeTerminal()
    with TrainingProgress(2, "train", stream) as progress:
        progress.advance(1.5)
        progress.advance(0.75)
    drawn = stream.getvalue()
    assert "2/2" in drawn and "loss 0.7500" in drawn
    assert "steps/s, compile " in drawn


def test_quiet_on_a_terminal_draws_nothing(monkeypatch):
    monkeypatch.setattr(Console, "is_terminal", property(lambda self: True))
    stream = FakeTerminal()
    with TrainingProgress(2, "train", stream, quiet=True) as progress:
        progress.advance(1.0)
    assert stream.getvalue() == ""
    assert progress.summary().startswith("train: 1 steps, loss 1.0000")
