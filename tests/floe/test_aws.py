"""Recognising a vanished S3 object in pyarrow's errors, against LocalStack's real answers."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pyarrow.fs as pafs
import pytest

from floe.aws import object_gone, pyarrow_s3_kwargs
from floe.settings import Settings


@pytest.mark.unit
@pytest.mark.parametrize(
    ("exc", "gone"),
    [
        (FileNotFoundError(2, "Path does not exist 'b/k'"), True),
        (
            OSError("AWS Error NO_SUCH_KEY during GetObject operation: The specified key does not exist."),
            True,
        ),
        (OSError("AWS Error RESOURCE_NOT_FOUND during GetObject operation: "), True),
        (OSError("AWS Error NO_SUCH_BUCKET during GetObject operation: "), True),
        (OSError("AWS Error NETWORK_CONNECTION during GetObject operation: curlCode: 7"), False),
        (OSError("AWS Error ACCESS_DENIED during GetObject operation: key does not exist 404"), False),
        # The old substring check took any text that mentioned a 404 for a missing object.
        (OSError("When reading 's3://b/404.csv': connection reset"), False),
    ],
)
def test_object_gone_reads_the_aws_error_name_not_the_text(exc: OSError, gone: bool) -> None:
    assert object_gone(exc) is gone


@pytest.mark.integration
@pytest.mark.parametrize("opener", ["open_input_stream", "open_input_file"])
def test_an_object_deleted_while_it_is_read_is_recognised(services: Settings, s3: Any, opener: str) -> None:
    bucket = f"gone-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="big.csv", Body=b"a" * (12 << 20))
    fs = pafs.S3FileSystem(**pyarrow_s3_kwargs(services.aws))
    open_: Callable[[str], Any] = getattr(fs, opener)
    missing: Any = None
    try:
        open_(f"{bucket}/absent.csv")
    except OSError as exc:
        missing = exc
    assert missing is not None and object_gone(missing)

    stream = open_(f"{bucket}/big.csv")
    assert len(stream.read(1 << 20)) == 1 << 20
    s3.delete_object(Bucket=bucket, Key="big.csv")
    with pytest.raises(OSError) as failed:
        stream.read()
    assert object_gone(failed.value), failed.value
