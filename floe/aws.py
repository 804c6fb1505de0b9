"""AWS client settings in one place (boto3, aiobotocore and pyarrow all take them from here)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import boto3
from botocore.config import Config

from floe.settings import AwsSettings


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
