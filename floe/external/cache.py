"""The process-wide result cache of IMMUTABLE external functions: a bounded, thread-safe LRU."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

MISS: Any = object()
"""What ``ResultCache.get`` returns for a key it does not hold (None is a result like any other)."""

_ENTRY_OVERHEAD = 128
"""Bytes an entry costs besides its key's arguments and its value (dict slot, tuples, objects)."""


def value_size(value: Any) -> int:
    """A rough size of a cached value: strings by length, anything else as a small scalar."""
    return len(value) if isinstance(value, str) else 16


class ResultCache:
    """Results by (function identity, context header values, argument text), least recently used
    evicted first, bounded by entries and by approximate bytes. Only successful results go in."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def bytes(self) -> int:
        """The approximate bytes held."""
        with self._lock:
            return self._bytes

    def get(self, key: Hashable) -> Any:
        """The cached result, or MISS."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return MISS
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: Hashable, value: Any, size: int) -> None:
        """Remember ``value`` for ``key``; ``size`` is what the key's arguments weigh. An entry
        larger than the whole bound is not kept."""
        cost = size + value_size(value) + _ENTRY_OVERHEAD
        if self.max_entries <= 0 or cost > self.max_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._entries[key] = (value, cost)
            self._bytes += cost
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                _, (_, freed) = self._entries.popitem(last=False)
                self._bytes -= freed

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0
