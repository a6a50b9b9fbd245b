"""Identity-keyed maps that keep their keys alive (``RefMap``, ``IndexMap``).

``id(x)`` is unique only while ``x`` lives, so a ``RefMap`` holds its key objects.
Source: Flax NNX 0.12 ``graphlib.RefMap`` and ``graphlib.IndexMap``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any, Generic, TypeVar

V = TypeVar("V")


class RefMap(MutableMapping[Any, V], Generic[V]):
    """A mapping keyed by object identity; iteration gives the key objects.

    >>> a, b = [], []
    >>> m = RefMap(); m[a] = 1; m[b] = 2
    >>> m[a], len(m), a in m, [] in m
    (1, 2, True, False)
    """

    __slots__ = ("_items",)

    def __init__(self, pairs: Mapping[Any, V] | Iterable[tuple[Any, V]] = ()) -> None:
        items = pairs.items() if isinstance(pairs, Mapping) else pairs
        self._items: dict[int, tuple[Any, V]] = {id(k): (k, v) for k, v in items}

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[Any, V]]) -> RefMap[V]:
        """A RefMap of ``(key, value)`` pairs (later pairs win, as in ``dict``)."""
        m = cls()
        m._items = {id(k): (k, v) for k, v in pairs}
        return m

    @classmethod
    def from_indexmap(cls, indexmap: Mapping[int, Any]) -> RefMap[int]:
        """The inverse of an ``IndexMap``: object -> index."""
        return cls.from_pairs((x, i) for i, x in indexmap.items())  # type: ignore[misc, return-value]

    def __getitem__(self, key: object) -> V:
        return self._items[id(key)][1]

    def __setitem__(self, key: object, value: V) -> None:
        self._items[id(key)] = (key, value)

    def __delitem__(self, key: object) -> None:
        del self._items[id(key)]

    def __contains__(self, key: object) -> bool:
        return id(key) in self._items

    def get(self, key: object, default: object = None) -> Any:
        item = self._items.get(id(key))
        return default if item is None else item[1]

    def __iter__(self) -> Iterator[Any]:
        return (key for key, _ in self._items.values())

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"RefMap({len(self)} items)"


class IndexMap(dict[int, Any]):
    """Reference index -> object, the inverse of a ``RefMap`` of indices (``index_ref``).

    >>> a = []
    >>> IndexMap.from_refmap(RefMap([(a, 0)]))[0] is a
    True
    """

    @staticmethod
    def from_refmap(refmap: RefMap[int]) -> IndexMap:
        """``{index: object}`` for every ``object -> index`` of ``refmap``."""
        return IndexMap((i, x) for x, i in refmap.items())
