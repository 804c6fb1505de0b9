"""The catalog in Redis: every kind of object as JSON, one hash per kind, under one hash tag."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar, cast

from floe.catalog.models import (
    SYSTEM_HIERARCHY,
    ApiIntegration,
    CatalogObject,
    Database,
    ExternalFunction,
    NamedFileFormat,
    NotificationIntegration,
    Pipe,
    Role,
    Schema,
    Stage,
    StorageIntegration,
    Table,
    User,
)
from floe.errors import ObjectNotFound
from floe.keys import Keys, RedisClient, one_slot

M = TypeVar("M", bound=CatalogObject)

KINDS: dict[type[CatalogObject], str] = {
    Database: "databases",
    Schema: "schemas",
    StorageIntegration: "integrations",
    Stage: "stages",
    Table: "tables",
    Pipe: "pipes",
    User: "users",
    Role: "roles",
    ApiIntegration: "api_integrations",
    ExternalFunction: "functions",
    NamedFileFormat: "file_formats",
    NotificationIntegration: "notification_integrations",
}


def now_ms() -> int:
    """Wall-clock time in ms since the epoch."""
    return int(time.time() * 1000)


class Catalog:
    """Read and write catalog objects. Readers cache by the catalog version counter."""

    def __init__(self, client: RedisClient, keys: Keys) -> None:
        self._r = client
        self._keys = keys
        self._cache: dict[str, tuple[int, dict[str, CatalogObject]]] = {}
        self._pins = threading.local()

    def version(self) -> int:
        """Current catalog version (the pinned one inside ``pinned``)."""
        pinned = getattr(self._pins, "version", None)
        if pinned is not None:
            return int(pinned)
        return int(self._r.get(self._keys.catalog_version()) or 0)

    @contextmanager
    def pinned(self) -> Iterator[None]:
        """Read the catalog at one version for the rest of the block, in this thread.

        A request looks up its user, the user's roles and a pipe: one version check instead of
        one per lookup, and every lookup sees the same catalog.
        """
        outer = getattr(self._pins, "version", None)
        self._pins.version = self.version()
        try:
            yield
        finally:
            self._pins.version = outer

    def all(self, model: type[M]) -> dict[str, M]:
        """Every object of a kind, by fully qualified name."""
        kind = KINDS[model]
        version = self.version()
        cached = self._cache.get(kind)
        if cached and cached[0] == version:
            return cast(dict[str, M], cached[1])
        raw = self._r.hgetall(self._keys.objects(kind))
        objs = {k.decode(): model.model_validate_json(v) for k, v in raw.items()}
        self._cache[kind] = (version, cast(dict[str, CatalogObject], objs))
        return objs

    def find(self, model: type[M], name: str) -> M | None:
        """The object with this fully qualified name, or None."""
        return self.all(model).get(name)

    def get(self, model: type[M], name: str) -> M:
        """The object with this fully qualified name, or ObjectNotFound."""
        obj = self.find(model, name)
        if obj is None:
            raise ObjectNotFound(KINDS[model][:-1], name)
        return obj

    def put(self, obj: CatalogObject) -> None:
        """Create or replace an object and bump the version in one transaction."""
        kind = KINDS[type(obj)]
        segments = self._keys.table_segments(obj.table_id) if isinstance(obj, Pipe) else None
        one_slot(self._written(kind, segments), "catalog put")
        pipe = self._r.pipeline(transaction=True)
        pipe.hset(self._keys.objects(kind), obj.name, obj.model_dump_json())
        if isinstance(obj, Pipe):
            # A pipe's blobs become part of its table for as long as the table incarnation lives.
            pipe.sadd(self._keys.table_segments(obj.table_id), obj.id)
        pipe.incr(self._keys.catalog_version())
        pipe.execute()

    def _written(self, kind: str, segments: str | None) -> list[str]:
        """The keys one catalog transaction touches (they share the {catalog} tag)."""
        keys = [self._keys.objects(kind), self._keys.catalog_version()]
        return keys if segments is None else [*keys, segments]

    def put_new(self, obj: M) -> M:
        """Create ``obj`` unless an object of its name exists; the one that is there afterwards (so
        two processes creating the same object at once agree on one)."""
        kind = KINDS[type(obj)]
        segments = self._keys.table_segments(obj.table_id) if isinstance(obj, Pipe) else None
        one_slot(self._written(kind, segments), "catalog put_new")
        with self._r.pipeline(transaction=True) as pipe:
            pipe.hsetnx(self._keys.objects(kind), obj.name, obj.model_dump_json())
            if isinstance(obj, Pipe):
                pipe.sadd(self._keys.table_segments(obj.table_id), obj.id)
            pipe.incr(self._keys.catalog_version())
            created = pipe.execute()[0]
        if created:
            return obj
        if isinstance(obj, Pipe):  # the loser's id joined the segments; it never commits a blob
            self._r.srem(self._keys.table_segments(obj.table_id), obj.id)
        found = self.find(type(obj), obj.name)
        assert found is not None, "an object that HSETNX found cannot be missing"
        return found

    def delete(self, model: type[M], name: str) -> M | None:
        """Remove an object; returns what was removed."""
        obj = self.find(model, name)
        if obj is None:
            return None
        segments = self._keys.table_segments(obj.id) if isinstance(obj, Table) else None
        one_slot(self._written(KINDS[model], segments), "catalog delete")
        pipe = self._r.pipeline(transaction=True)
        pipe.hdel(self._keys.objects(KINDS[model]), name)
        if isinstance(obj, Table):
            pipe.delete(self._keys.table_segments(obj.id))
        pipe.incr(self._keys.catalog_version())
        pipe.execute()
        return obj

    def segments(self, table: Table) -> list[str]:
        """Pipe ids whose committed blobs belong to this table."""
        members = self._r.smembers(self._keys.table_segments(table.id))
        return sorted(m.decode() for m in members)

    def pipes_for_table(self, table: Table) -> list[Pipe]:
        """Current pipes that load into this table incarnation."""
        return [p for p in self.all(Pipe).values() if p.table_id == table.id]

    def pipe_by_id(self, pipe_id: str) -> Pipe | None:
        """The current pipe with this incarnation id."""
        for p in self.all(Pipe).values():
            if p.id == pipe_id:
                return p
        return None


def role_closure(catalog: Catalog, roles: Iterable[str]) -> frozenset[str]:
    """``roles`` with every role granted to them, transitively, the system roles under them and
    PUBLIC: the roles whose privileges a session holds."""
    seen: set[str] = set()
    stack = [*roles, "PUBLIC"]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        stack.extend(SYSTEM_HIERARCHY.get(name, ()))
        role = catalog.find(Role, name)
        if role is not None:
            stack.extend(role.roles)
    return frozenset(seen)
