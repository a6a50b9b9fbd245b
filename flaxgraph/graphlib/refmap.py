"""Identity-keyed maps that keep their keys alive.

``id(x)`` is only unique while ``x`` is alive: a temporary object freed during a
walk can hand its id to the next one. A ``RefMap`` stores the object next to its
value, so every key it holds stays alive for as long as the map does.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, MutableMapping
from typing import Any, Generic, TypeVar

V = TypeVar("V")


class RefMap(MutableMapping[Any, V], Generic[V]):
    """A mapping keyed by object identity; iteration gives the key objects.

    Example::

      >>> a, b = [], []
      >>> m = RefMap(); m[a] = 1; m[b] = 2
      >>> m[a], len(m), a in m, [] in m
      (1, 2, True, False)
    """

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: dict[int, tuple[Any, V]] = {}

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[Any, V]]) -> RefMap[V]:
        """A RefMap of ``(key, value)`` pairs (later pairs win, as in ``dict``)."""
        m = cls()
        m._items = {id(k): (k, v) for k, v in pairs}
        return m

    def __getitem__(self, key: Any) -> V:
        return self._items[id(key)][1]

    def __setitem__(self, key: Any, value: V) -> None:
        self._items[id(key)] = (key, value)

    def __delitem__(self, key: Any) -> None:
        del self._items[id(key)]

    def __contains__(self, key: object) -> bool:
        return id(key) in self._items

    def get(self, key: Any, default: Any = None) -> Any:
        item = self._items.get(id(key))
        return default if item is None else item[1]

    def __iter__(self) -> Iterator[Any]:
        return (key for key, _ in self._items.values())

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"RefMap({len(self)} items)"
