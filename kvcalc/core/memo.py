"""``Memo``: a bounded cache of derived values, the one kept-results mechanism of the product path.

A key is either values (a sweep's settings, its traffic) or the ``id`` of objects passed as
``keep``: the entry holds those objects, so while it lives no other object can take their ids
(the key is theirs alone). When full, the memo starts afresh (it bounds memory, never answers).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

V = TypeVar("V")


class Memo(Generic[V]):
    __slots__ = ("limit", "store")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.store: dict[Hashable, tuple[V, Any]] = {}

    def get(self, key: Hashable, make: Callable[..., V], *args: Any, keep: Any = None) -> V:
        """The value kept for ``key``, or ``make(*args)`` kept with ``keep``. An unhashable key (a
        list from a gate file) is not kept: ``make`` runs, and raises if it must, on every call."""
        store = self.store
        try:
            hit = store.get(key)
        except TypeError:
            return make(*args)
        if hit is None:
            if len(store) >= self.limit:
                store.clear()
            hit = store[key] = (make(*args), keep)
        return hit[0]

    def clear(self) -> None:
        self.store.clear()
