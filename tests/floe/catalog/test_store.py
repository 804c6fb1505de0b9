"""The catalog store against the real Redis: version-checked caching and per-request pinning."""

from __future__ import annotations

import pytest
import redis

from floe.catalog import Catalog, Role
from floe.keys import Keys
from floe.settings import Settings

pytestmark = pytest.mark.integration


def test_a_change_is_seen_by_the_next_lookup(isolated_settings: Settings, redis_client: redis.Redis) -> None:
    keys = Keys(isolated_settings.redis.prefix)
    reader, writer = Catalog(redis_client, keys), Catalog(redis_client, keys)
    writer.put(Role(name="R"))
    assert reader.find(Role, "R") is not None
    writer.put(Role(name="R", grants={"PIPE FLOE.PUBLIC.P": ["OPERATE"]}))
    found = reader.find(Role, "R")
    assert found is not None and found.grants == {"PIPE FLOE.PUBLIC.P": ["OPERATE"]}


def test_grants_stored_before_every_object_had_privileges_read_as_pipe_grants(
    isolated_settings: Settings, redis_client: redis.Redis
) -> None:
    """A role written by an older Floe keyed its grants by the pipe's name alone."""
    keys = Keys(isolated_settings.redis.prefix)
    redis_client.hset(
        keys.objects("roles"), "OLD", '{"name": "OLD", "grants": {"FLOE.PUBLIC.P": ["MONITOR"]}}'
    )
    redis_client.incr(keys.catalog_version())
    found = Catalog(redis_client, keys).find(Role, "OLD")
    assert found is not None and found.grants == {"PIPE FLOE.PUBLIC.P": ["MONITOR"]}
    assert found.owner == "ACCOUNTADMIN" and found.roles == [] and found.future == {}


def test_pinned_reads_one_version_and_lets_go_after(
    isolated_settings: Settings, redis_client: redis.Redis
) -> None:
    """Safeguard: a request sees one catalog (a grant revoked halfway through a request applies to
    the next one, not to half of this one), and the pin ends with its block."""
    keys = Keys(isolated_settings.redis.prefix)
    reader, writer = Catalog(redis_client, keys), Catalog(redis_client, keys)
    writer.put(Role(name="R", grants={"P": ["OPERATE"]}))
    with reader.pinned():
        assert reader.find(Role, "R") is not None
        writer.delete(Role, "R")
        assert reader.find(Role, "R") is not None
    assert reader.find(Role, "R") is None
