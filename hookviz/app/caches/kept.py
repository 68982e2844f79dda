"""``Kept``: values by key, least recently used dropped first, bounded by count and (for bytes)
by total size. A store, not a cache of a function: the page puts what it made or was given."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any


class Kept:
    """Values by key, least recently used dropped first, bounded by count and (for bytes) total
    size: the uploaded checkpoints, the made visualizations. A session that loses its
    checkpoint to eviction registers it again on its next run: its uploader still holds the
    file."""

    def __init__(self, entries: int, total: float = float("inf")) -> None:
        self._lock = threading.Lock()
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._entries, self._total = entries, total

    def put(self, value: Any, key: Hashable | None = None) -> Hashable:
        """Keep ``value`` under ``key`` (default: the SHA-256 of its bytes); returns the key."""
        key = key or hashlib.sha256(value).hexdigest()
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._entries or (
                self._total != float("inf")  # (sized only when bounded by size: bytes)
                and len(self._items) > 1
                and sum(map(len, self._items.values())) > self._total
            ):
                self._items.popitem(last=False)
        return key

    def has(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._items

    def get(self, key: Hashable, *default: Any) -> Any:
        """The value under ``key``; ``default`` where there is none, if given, else KeyError."""
        with self._lock:
            if default and key not in self._items:
                return default[0]
            self._items.move_to_end(key)
            return self._items[key]
