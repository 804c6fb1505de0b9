"""AWS client settings in one place (boto3, aiobotocore and pyarrow all take them from here)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlparse

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from floe.settings import AwsSettings

AWS_ERRORS: tuple[type[Exception], ...] = (BotoCoreError, ClientError, OSError)
"""What a boto3 or aiobotocore call raises when the service refuses it or the connection breaks."""


def client_kwargs(aws: AwsSettings) -> dict[str, Any]:
    """Keyword arguments for boto3/aiobotocore ``client(...)``."""
    kwargs: dict[str, Any] = {
        "region_name": aws.region,
        "aws_access_key_id": aws.access_key_id,
        "aws_secret_access_key": aws.secret_access_key.get_secret_value(),
        "config": Config(retries={"max_attempts": 5, "mode": "standard"}, max_pool_connections=32),
    }
    if aws.endpoint_url:
        kwargs["endpoint_url"] = aws.endpoint_url
    return kwargs


def client(aws: AwsSettings, service: str) -> Any:
    """A boto3 client for S3 or SQS."""
    return boto3.session.Session().client(service, **client_kwargs(aws))  # type: ignore[call-overload]


def pyarrow_s3_kwargs(aws: AwsSettings) -> dict[str, Any]:
    """Keyword arguments for ``pyarrow.fs.S3FileSystem``."""
    kwargs: dict[str, Any] = {
        "access_key": aws.access_key_id,
        "secret_key": aws.secret_access_key.get_secret_value(),
        "region": aws.region,
    }
    if aws.endpoint_url:
        url = urlparse(aws.endpoint_url)
        kwargs["endpoint_override"] = url.netloc
        kwargs["scheme"] = url.scheme or "http"
    return kwargs


# pyarrow reports a failed S3 call as a plain OSError whose text starts with the AWS error's name;
# only a missing object at open time becomes FileNotFoundError. An object deleted while it is read
# fails the next ranged GET with NO_SUCH_KEY (or RESOURCE_NOT_FOUND, for a random-access file).
_PYARROW_AWS_ERROR = re.compile(r"AWS Error ([A-Z_]{1,64}) during ")
_NOT_FOUND_ERRORS = frozenset({"NO_SUCH_KEY", "NO_SUCH_BUCKET", "RESOURCE_NOT_FOUND"})


def object_gone(exc: OSError) -> bool:
    """Whether a read through pyarrow's S3 filesystem failed because the object or its bucket is gone."""
    if isinstance(exc, FileNotFoundError):
        return True
    match = _PYARROW_AWS_ERROR.match(str(exc))
    return match is not None and match.group(1) in _NOT_FOUND_ERRORS
