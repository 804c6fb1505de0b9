"""The benchmark's own progress bar (bench/run.py): the phase under way, and the selected parts
done out of all of them, a phase counting only when it is a whole part."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from rich.progress import Progress

from bench.run import Run

pytestmark = pytest.mark.unit


def test_the_run_bar_names_the_phase_and_counts_the_parts_done() -> None:
    run = SimpleNamespace(parts={"floe", "streaming", "rest"}, overall=None, parts_done=set())
    progress = Progress(disable=True)

    def phase(name: str) -> None:
        Run._show_phase(run, progress, name)
        Run.part_done(run, progress, name)

    phase("stack")  # not a part: shown, not counted
    (task,) = progress.tasks
    assert (task.description, task.completed, task.total) == ("bench: stack (0 of 3 parts done)", 0, 3)
    phase("floe")
    phase("streaming_1_channel")  # a step of the streaming part
    assert task.completed == 1
    Run.part_done(run, progress, "streaming")  # bench.run's streaming() ends its part
    Run.part_done(run, progress, "streaming")  # counted once
    Run._show_phase(run, progress, "rest")
    assert (task.description, task.completed) == ("bench: rest (2 of 3 parts done)", 2)
