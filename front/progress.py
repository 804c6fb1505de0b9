"""Progress of `floe sql` while a statement runs: a spinner on stderr with the time elapsed, then the
rows received so far as a streamed answer comes in (a large query, ALTER PIPE ... REFRESH).

Only on a terminal: when stderr is not one (a pipe, a file, a CI log) nothing is drawn, so
scripts read what they always read. The spinner lives on stderr and the result goes to stdout;
when both are the same terminal, the spinner steps aside while a page is printed (``paused``),
so the two never share a line. Its text is cleared once the statement is done.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

HEAD_CHARS = 48
"""How much of the statement the spinner shows."""


class SqlProgress:
    """A context manager around one statement's answer; ``received`` counts the rows."""

    def __init__(self, console: Console, statement: str) -> None:
        self._progress: Progress | None = None
        if console.is_terminal:
            self._progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=console,
                transient=True,
                # The result must reach stdout itself, never through the stderr console.
                redirect_stdout=False,
                redirect_stderr=False,
            )
        head = " ".join(statement.split())
        self._head = head if len(head) <= HEAD_CHARS else head[: HEAD_CHARS - 1] + "…"
        self._task: TaskID | None = None
        self.rows = 0

    def __enter__(self) -> SqlProgress:
        if self._progress is not None:
            self._progress.start()
            self._task = self._progress.add_task(f"running {self._head}", total=None)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._progress is not None:
            self._progress.stop()

    def received(self, rows: int) -> None:
        """``rows`` more rows came."""
        self.rows += rows
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=f"{self.rows:,} rows received ({self._head})")

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Clear the spinner while the caller prints to stdout, if stdout is the terminal too."""
        if self._progress is None or not sys.stdout.isatty():
            yield
            return
        self._progress.stop()
        try:
            yield
        finally:
            self._progress.start()
