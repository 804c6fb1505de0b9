"""Volume: 10,000 small files put at once all load, each with exactly one history entry."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chaos.oracle import assert_exactly_once, file_set
from tests.chaos.test_faults import put_all, wait_all_loaded
from tests.conftest import Stack
from tests.e2e.test_autoingest import make_pipe

pytestmark = [pytest.mark.chaos, pytest.mark.volume]


# The load alone may take up to 900 s, more than pytest's global 600 s timeout allows.
@pytest.mark.timeout(1200)
def test_ten_thousand_files_put_at_once(stack: Stack, bucket: str, s3: Any) -> None:
    """Safeguards: the consumer's batched receive and the source's per-batch file limit
    (pipeline.max_files_per_batch) move a burst through in bounded micro-batches; dedup and the
    registrar keep one history entry per file however the burst is split."""
    table, pipe = make_pipe(stack, bucket)
    files = file_set(10_000, "burst")
    put_all(s3, bucket, files)
    wait_all_loaded(stack, table, files, timeout=900)
    assert_exactly_once(stack, table, pipe, files)
