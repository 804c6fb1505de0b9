"""The shape of an acceptance case, and the list of all of them."""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Case:
    """One documented behaviour: the input files, the pipe, and the rows and history it must give.

    The SQL strings may use ``{stage}``, ``{table}``, ``{pipe}``, ``{bucket}``, ``{prefix}`` and
    ``{name}`` (a name unique to the case, for objects its ``setup`` creates); the runner fills them.
    """

    id: str
    """Short name, the test's parameter id."""
    source: str
    """Where Snowflake documents it: a ../shared/notes/copy-reference.md key and URL, with the example."""
    columns: str
    """The table's column list, as in CREATE TABLE t (...)."""
    copy: str
    """What follows ``COPY INTO {table}`` in the pipe: FROM ... FILE_FORMAT = (...) ON_ERROR = ..."""
    files: dict[str, bytes]
    """File name (relative to the stage) -> contents."""
    rows: list[tuple[Any, ...]]
    """The table's rows afterwards, in the order of ``query``."""
    history: dict[str, dict[str, Any]]
    """File name -> the COPY_HISTORY columns (a subset) its final row must have."""
    query: str = "SELECT * FROM {table} ORDER BY 1"
    """How the rows are read back."""
    setup: tuple[str, ...] = ()
    """Statements run before the pipe is created (file formats, ALTER TABLE ...)."""
    stage_options: str = ""
    """Appended to CREATE STAGE (for example FILE_FORMAT = (...))."""
    table_options: str = ""
    """Appended to CREATE TABLE (for example ENABLE_SCHEMA_EVOLUTION = TRUE)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form data a case module's own checks use."""


def all_cases() -> list[Case]:
    """Every ``CASES`` list of the ``cases_*`` modules of this package, ids unique."""
    package = importlib.import_module(__package__ or "tests.e2e.acceptance")
    cases: list[Case] = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name.startswith("cases_"):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            cases.extend(module.CASES)
    ids = [c.id for c in cases]
    duplicated = sorted({i for i in ids if ids.count(i) > 1})
    assert not duplicated, f"acceptance case ids must be unique: {duplicated}"
    return cases
