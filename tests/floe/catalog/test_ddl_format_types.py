"""FILE_FORMAT TYPE = AVRO | ORC, the JSON and Parquet options issue 16 added, and the options a
TYPE does not take (CREATE FILE FORMAT's per-type lists)."""

from __future__ import annotations

import pytest

from floe.catalog.ddl import CreatePipe, CreateStage, parse
from floe.errors import CompilationError

pytestmark = pytest.mark.unit

STAGE = "CREATE STAGE s URL = 's3://b/p/' STORAGE_INTEGRATION = i FILE_FORMAT = "
PIPE = "CREATE PIPE p AS COPY INTO t FROM @s FILE_FORMAT = "


def stage_format(options: str) -> dict[str, object]:
    s = parse(STAGE + f"({options})")
    assert isinstance(s, CreateStage)
    return s.file_format


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ("TYPE = AVRO", {"type": "AVRO"}),
        ("TYPE = 'avro' COMPRESSION = ZSTD", {"type": "AVRO", "compression": "ZSTD"}),
        (
            "TYPE = AVRO REPLACE_INVALID_CHARACTERS = TRUE",
            {"type": "AVRO", "replace_invalid_characters": True},
        ),
        (
            "TYPE = ORC TRIM_SPACE = FALSE NULL_IF = ('')",
            {"type": "ORC", "trim_space": False, "null_if": [""]},
        ),
        ("TYPE = JSON ALLOW_DUPLICATE = TRUE", {"type": "JSON", "allow_duplicate": True}),
        ("TYPE = JSON STRIP_NULL_VALUES = TRUE", {"type": "JSON", "strip_null_values": True}),
        ("TYPE = JSON IGNORE_UTF8_ERRORS = TRUE", {"type": "JSON", "ignore_utf8_errors": True}),
        ("TYPE = JSON ENABLE_OCTAL = TRUE", {"type": "JSON", "enable_octal": True}),
        ("TYPE = PARQUET BINARY_AS_TEXT = FALSE", {"type": "PARQUET", "binary_as_text": False}),
        ("TYPE = PARQUET USE_LOGICAL_TYPE = TRUE", {"type": "PARQUET", "use_logical_type": True}),
    ],
)
def test_avro_orc_and_the_new_json_and_parquet_options_are_accepted(
    options: str, expected: dict[str, object]
) -> None:
    assert stage_format(options) == expected


def test_avro_in_a_pipe_copy() -> None:
    s = parse(PIPE + "(TYPE = AVRO)")
    assert isinstance(s, CreatePipe) and s.file_format == {"type": "AVRO"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("TYPE = ORC COMPRESSION = GZIP", "COMPRESSION does not apply to TYPE = ORC"),
        ("TYPE = ORC SKIP_HEADER = 1", "SKIP_HEADER does not apply to TYPE = ORC"),
        ("TYPE = AVRO STRIP_OUTER_ARRAY = TRUE", "STRIP_OUTER_ARRAY does not apply to TYPE = AVRO"),
        ("TYPE = AVRO BINARY_AS_TEXT = FALSE", "BINARY_AS_TEXT does not apply to TYPE = AVRO"),
        ("TYPE = AVRO COMPRESSION = BZ2", "COMPRESSION = BZ2 does not apply to TYPE = AVRO"),
        ("TYPE = CSV ALLOW_DUPLICATE = TRUE", "ALLOW_DUPLICATE does not apply to TYPE = CSV"),
        ("TYPE = PARQUET STRIP_NULL_VALUES = TRUE", "STRIP_NULL_VALUES does not apply to TYPE = PARQUET"),
        ("TYPE = JSON USE_LOGICAL_TYPE = TRUE", "USE_LOGICAL_TYPE does not apply to TYPE = JSON"),
        ("TYPE = XML", "TYPE = XML is not supported"),
    ],
)
def test_an_option_the_type_does_not_take_is_refused(options: str, message: str) -> None:
    with pytest.raises(CompilationError, match=message):
        stage_format(options)


def test_the_refusal_lists_what_the_type_takes() -> None:
    with pytest.raises(CompilationError) as caught:
        stage_format("TYPE = ORC SKIP_HEADER = 1")
    assert caught.value.message.endswith("(TYPE = ORC takes NULL_IF, REPLACE_INVALID_CHARACTERS, TRIM_SPACE)")


def test_without_type_the_options_are_left_to_the_stages_type() -> None:
    s = parse("CREATE PIPE p AS COPY INTO t FROM @s FILE_FORMAT = (STRIP_NULL_VALUES = TRUE)")
    assert isinstance(s, CreatePipe) and s.file_format == {"strip_null_values": True}
