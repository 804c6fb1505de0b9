"""Attacks on stored blobs by someone who can write the tables bucket or read Redis: swapping one
blob's object for another's, and reading statistic values from the manifest."""

from __future__ import annotations

import json
from typing import Any, cast

import redis

from floe.catalog import Catalog, Table
from floe.catalog.ddl import Defaults, qualify
from floe.keys import Keys
from floe.settings import Settings


def table_of(settings: Settings, client: redis.Redis, name: str) -> tuple[Catalog, Table]:
    """The catalog and the table named ``name`` (unqualified names use the default schema)."""
    catalog = Catalog(client, Keys(settings.redis.prefix))
    qualified = str(qualify(name, Defaults(settings.database, settings.schema_name)))
    return catalog, catalog.get(Table, qualified)


def manifest(settings: Settings, client: redis.Redis, name: str) -> dict[str, str]:
    """The raw manifest of a table, as Redis holds it: blob name -> entry JSON."""
    catalog, table = table_of(settings, client, name)
    keys = Keys(settings.redis.prefix)
    entries: dict[str, str] = {}
    for pipe_id in catalog.segments(table):
        raw = cast(dict[bytes, bytes], client.hgetall(keys.blobs(pipe_id)))
        entries.update({k.decode(): v.decode() for k, v in raw.items()})
    return entries


def blob_names(settings: Settings, client: redis.Redis, name: str) -> list[str]:
    """The committed blob names of a table, oldest batch first."""
    return sorted(json.loads(v)["name"] for v in manifest(settings, client, name).values())


def swap_blob(s3: Any, bucket: str, source: str, target: str) -> bytes:
    """Overwrite the object ``target`` with the bytes of ``source`` (as someone with write access to
    the tables bucket could); returns those bytes, after checking the swap took effect."""
    s3.copy_object(Bucket=bucket, Key=target, CopySource={"Bucket": bucket, "Key": source})
    body = cast(bytes, s3.get_object(Bucket=bucket, Key=source)["Body"].read())
    if s3.get_object(Bucket=bucket, Key=target)["Body"].read() != body:
        raise AssertionError(f"the swap of {source} onto {target} did not take effect")
    return body
