"""USE_VECTORIZED_SCANNER (decision 83): a Parquet option of FILE_FORMAT and of CREATE FILE FORMAT,
refused for the other TYPEs as Snowflake's per-type lists have it."""

from __future__ import annotations

import pytest

from floe.catalog.ddl import CreateFileFormat, CreatePipe, CreateStage, parse
from floe.catalog.models import FileFormat
from floe.errors import CompilationError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("value", ["TRUE", "FALSE", "true"])
def test_parquet_takes_use_vectorized_scanner(value: str) -> None:
    stage = parse(
        "CREATE STAGE s URL = 's3://b/p/' STORAGE_INTEGRATION = i "
        f"FILE_FORMAT = (TYPE = PARQUET USE_VECTORIZED_SCANNER = {value})"
    )
    assert isinstance(stage, CreateStage)
    assert stage.file_format == {"type": "PARQUET", "use_vectorized_scanner": value.upper() == "TRUE"}
    pipe = parse(
        "CREATE PIPE p AS COPY INTO t FROM @s FILE_FORMAT = (TYPE = PARQUET USE_VECTORIZED_SCANNER = TRUE)"
    )
    assert isinstance(pipe, CreatePipe) and pipe.file_format["use_vectorized_scanner"] is True
    named = parse("CREATE FILE FORMAT f TYPE = PARQUET USE_VECTORIZED_SCANNER = TRUE")
    assert isinstance(named, CreateFileFormat)


def test_the_default_is_false() -> None:
    assert FileFormat(type="PARQUET").use_vectorized_scanner is False


@pytest.mark.parametrize("kind", ["CSV", "JSON", "AVRO", "ORC"])
def test_other_types_refuse_it(kind: str) -> None:
    with pytest.raises(CompilationError, match=f"USE_VECTORIZED_SCANNER does not apply to TYPE = {kind}"):
        parse(
            "CREATE PIPE p AS COPY INTO t FROM @s "
            f"FILE_FORMAT = (TYPE = {kind} USE_VECTORIZED_SCANNER = TRUE)"
        )


def test_a_value_that_is_not_boolean_is_refused() -> None:
    with pytest.raises(CompilationError, match="USE_VECTORIZED_SCANNER"):
        parse(
            "CREATE PIPE p AS COPY INTO t FROM @s "
            "FILE_FORMAT = (TYPE = PARQUET USE_VECTORIZED_SCANNER = 'maybe')"
        )
