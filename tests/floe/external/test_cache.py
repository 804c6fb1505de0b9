"""The IMMUTABLE result cache: least recently used first out, bounded by entries and bytes."""

from __future__ import annotations

import pytest

from floe.external.cache import MISS, ResultCache

pytestmark = pytest.mark.unit


def test_least_recently_used_entries_go_first() -> None:
    cache = ResultCache(max_entries=2, max_bytes=1 << 20)
    cache.put("a", 1, 1)
    cache.put("b", None, 1)  # None is a result, not a miss
    assert cache.get("a") == 1  # now "b" is the least recently used
    cache.put("c", 3, 1)
    assert cache.get("b") is MISS
    assert cache.get("a") == 1 and cache.get("c") == 3
    assert len(cache) == 2


def test_bytes_are_bounded_and_an_oversized_entry_is_not_kept() -> None:
    cache = ResultCache(max_entries=100, max_bytes=1000)
    cache.put("big", "x" * 5000, 1)
    assert cache.get("big") is MISS and cache.bytes == 0
    for i in range(20):
        cache.put(i, "y" * 100, 10)
    assert cache.bytes <= 1000
    assert cache.get(19) == "y" * 100 and cache.get(0) is MISS
    cache.put(19, "z", 10)  # replacing an entry does not count it twice
    assert cache.bytes <= 1000 and cache.get(19) == "z"
    cache.clear()
    assert len(cache) == 0 and cache.bytes == 0


def test_zero_entries_disables_the_cache() -> None:
    cache = ResultCache(max_entries=0, max_bytes=1000)
    cache.put("a", 1, 1)
    assert cache.get("a") is MISS
