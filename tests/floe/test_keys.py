"""The key layout keeps every atomic step on one Redis Cluster slot, and ``one_slot`` refuses one
that is not (the cluster itself is in tests/infra/test_redis_cluster.py)."""

from __future__ import annotations

import pytest
import redis
from pydantic import ValidationError
from redis.crc import key_slot

from floe import keys as key_layer
from floe.keys import Keys, SlotError, checking_slots, one_slot, slot
from floe.settings import RedisSettings

pytestmark = pytest.mark.unit

K = Keys("floe")


def pipe_keys(pipe_id: str) -> list[str]:
    """Every key Floe writes for one pipe incarnation."""
    return [
        K.queue(pipe_id),
        K.file(pipe_id, "in/2026/a.csv"),
        K.file(pipe_id, "odd {name} with }{ braces.csv"),
        K.file_errors(pipe_id, "odd {name} with }{ braces.csv"),
        K.skipped(pipe_id),
        K.history(pipe_id),
        K.events(pipe_id),
        K.blobs(pipe_id),
        K.batch_marker(pipe_id, "query-1", 7),
        K.status(pipe_id),
        K.retired(pipe_id),
        K.channel(pipe_id, "ch{1}"),
        K.channels(pipe_id),
        K.rows(pipe_id),
        K.row_data(pipe_id, "ch{1}", "inc", 1, 2),
    ]


def catalog_keys() -> list[str]:
    return [K.objects("pipes"), K.objects("tables"), K.table_segments("t1"), K.catalog_version()]


@pytest.fixture
def checking(monkeypatch: pytest.MonkeyPatch) -> None:
    """one_slot refuses for the length of a test, whatever the process had set."""
    monkeypatch.setattr(key_layer, "_checking", True)


def test_a_pipe_keys_share_its_tag_whatever_the_file_and_channel_names() -> None:
    # The first {...} decides: the pipe's tag comes before any brace a path or channel name holds.
    assert {slot(k) for k in pipe_keys("0123456789abcdef")} == {key_slot(b"p:0123456789abcdef")}


def test_catalog_keys_share_one_slot_and_other_tags_have_their_own() -> None:
    assert {slot(k) for k in catalog_keys()} == {key_slot(b"catalog")}
    assert slot(K.breakers()) == key_slot(b"breakers")
    # The streaming ledger counts over pipes, tables and users: one tag of its own for all its keys.
    assert {slot(K.quota(p)) for p in ("held", "since", "totals", "reconciled", "cursor")} == {
        key_slot(b"quota")
    }
    assert slot(K.heartbeat("api")) == key_slot(b"proc")


def test_one_slot_accepts_every_step_of_one_tag(checking: None) -> None:
    one_slot(pipe_keys("0123456789abcdef"), "a pipe's commit")
    one_slot(catalog_keys(), "a catalog transaction")
    one_slot([], "nothing")


def test_one_slot_refuses_keys_of_two_pipes(checking: None) -> None:
    a, b = "0000000000000001", "0000000000000002"
    assert slot(K.queue(a)) != slot(K.queue(b))
    with pytest.raises(SlotError, match=r"MGET touches keys of two Redis Cluster slots .*p:0000000000000002"):
        one_slot([K.file(a, "x.csv"), K.file(a, "y.csv"), K.file(b, "x.csv")], "MGET")


def test_one_slot_refuses_a_catalog_key_beside_a_pipe_key(checking: None) -> None:
    with pytest.raises(SlotError):
        one_slot([K.objects("pipes"), K.queue("0000000000000001")], "a script")


def test_one_slot_lets_anything_pass_while_not_checking(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(key_layer, "_checking", False)
    one_slot([K.queue("0000000000000001"), K.queue("0000000000000002")], "MGET")


def test_a_client_of_settings_with_check_slots_turns_checking_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(key_layer, "_checking", False)
    RedisSettings(password_file="/nonexistent").client().close()  # redis-py connects lazily
    assert not checking_slots()
    client = RedisSettings(password_file="/nonexistent", check_slots=True).client()
    client.close()
    assert checking_slots()
    assert isinstance(client, redis.Redis)  # cluster is off: a plain client


@pytest.mark.parametrize("prefix", ["floe{x}", "a}b", "{"])
def test_a_prefix_with_a_brace_is_refused(prefix: str) -> None:
    with pytest.raises(ValidationError, match="must not contain"):
        RedisSettings(prefix=prefix)
