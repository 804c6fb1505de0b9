"""The CPU time a piece of work takes, for the tests that check a parser or matcher runs in linear time.

Those tests compare the cost of an input with that of one twice as long. Wall-clock time also counts
the moments the test's thread waits for a core, which on a shared two-core machine (two xdist
workers, a Spark job, LocalStack) can be many times the work itself and lands in one run but not the
other. The calling thread's own CPU time (``time.thread_time``) counts only the work, so a ratio of
two of them shows how the work grows, whatever else runs.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable


def cpu_seconds(work: Callable[[], object], repeat: int = 3, budget_s: float = 0.25) -> float:
    """The least CPU time of the calling thread over up to ``repeat`` runs of ``work`` (fewer once
    ``budget_s`` is spent). The collector is off while timing: a parser makes an object per token, and
    a collection landing in one run but not another would swamp the ratio. No collection runs before
    either: in a worker that has run a thousand tests a full one takes a second, which a test timing
    hundreds of calls paid each time."""
    best = float("inf")
    spent = 0.0
    for _ in range(repeat):
        gc.disable()
        try:
            started = time.thread_time()
            work()
            took = time.thread_time() - started
        finally:
            gc.enable()
        best, spent = min(best, took), spent + took
        if spent > budget_s:
            break
    return best
