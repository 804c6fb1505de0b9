"""The initial file state the dedup step writes, spliced from a template (pure logic)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from floe.catalog import CopySpec, Pipe
from floe.history import FileState
from services.dedup import FileRef, _StateTemplate

pytestmark = pytest.mark.unit

PIPE = Pipe(
    name="D.S.P",
    copy_spec=CopySpec(table="D.S.T", stage="D.S.S", on_error="SKIP_FILE_N", on_error_limit=7),
    table_id="t",
    stage_url="s3://b/x/",
)


@given(path=st.text(max_size=300), size=st.none() | st.integers(min_value=0, max_value=2**62))
def test_template_json_is_the_models_json(path: str, size: int | None) -> None:
    """Safeguard: the spliced JSON reads back as exactly the FileState the model would have
    written, whatever the path holds (quotes, backslashes, control characters, non-ASCII)."""
    spliced = _StateTemplate(PIPE, 1_795_000_000_000, "rest").json(FileRef(path, size))
    expected = FileState(
        path=path,
        stage_location=PIPE.stage_url,
        size=size,
        received_ms=1_795_000_000_000,
        error_limit=7,
        source="rest",
    )
    assert FileState.model_validate_json(spliced) == expected
