"""Structure snapshots: whether a graph's GraphDef is still the same, told without a walk.

What is compared and why it suffices: ``docs/design.md``, "The fast path" (structure
versions, metadata dicts, list and dict items). A graph holding nodes that keep no
version is never unchanged.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any, NamedTuple

from flaxgraph.graphlib.registry import ARRAY, DICT, NODE, REGISTRY, SEQUENCE, VARIABLE
from flaxgraph.variablelib.variable import metadata_of

_get_version = operator.attrgetter("_obj_version")
_is = operator.is_


class StructureSnapshot:
    """The structure of the graph made of ``nodes`` (its Objects and Variables), as it is now.

    Attributes:
      objects, versions: the Objects and their structure versions.
      variables, metadata: the Variables and their metadata dicts.
      lists, list_items: the lists inside the Objects and their items' keys (``item_key``).
      dicts, dict_items: the same for dicts: ``(keys, values)``.
      versioned: whether every graph node keeps a structure version.
    """

    __slots__ = (
        "objects",
        "versions",
        "variables",
        "metadata",
        "lists",
        "list_items",
        "dicts",
        "dict_items",
        "versioned",
    )

    def __init__(self, nodes: Iterable[Any]):
        kind_of = REGISTRY.kind_of
        kinds = [(n, kind_of(n)) for n in nodes]
        self.objects = [n for n, kind in kinds if kind is NODE]
        self.versions = [getattr(o, "_obj_version", None) for o in self.objects]
        self.versioned = None not in self.versions
        self.variables = [n for n, kind in kinds if kind is VARIABLE]
        self.metadata = list(map(metadata_of, self.variables))
        lists: list[Any] = []
        dicts: list[Any] = []
        if self.versioned:  # Objects all: their attributes are their __dict__
            for obj in self.objects:
                for child in obj.__dict__.values():
                    _collect_containers(child, lists, dicts)
        self.lists, self.list_items = lists, [tuple(map(item_key, c)) for c in lists]
        self.dicts = dicts
        self.dict_items = [(tuple(d), tuple(map(item_key, d.values()))) for d in dicts]

    def unchanged(self) -> bool:
        """Whether the graph still has the snapshot's structure."""
        if not self.versioned:
            return False
        if list(map(_get_version, self.objects)) != self.versions:
            return False
        if list(map(metadata_of, self.variables)) != self.metadata:
            return False
        for c, items in zip(self.lists, self.list_items):
            if len(c) != len(items) or not all(map(same_item, c, items)):
                return False
        for d, (keys, values) in zip(self.dicts, self.dict_items):
            if len(d) != len(keys) or tuple(d) != keys:
                return False
            if not all(map(same_item, d.values(), values)):
                return False
        return True


class ArrayItem(NamedTuple):
    """A snapshot's key for an array item: its type (another array there keeps the structure)."""

    type: type


class TupleItem(NamedTuple):
    """A snapshot's key for a tuple item: its items' keys (a tuple is compared item by item)."""

    items: tuple[Any, ...]


def item_key(x: Any) -> Any:
    """A snapshot's key for a list or dict item: ``ArrayItem``, ``TupleItem`` or the item itself."""
    kind = REGISTRY.kind_of(x)
    if kind is ARRAY:
        return ArrayItem(type(x))
    if type(x) is tuple:
        return TupleItem(tuple(map(item_key, x)))
    return x


def same_item(x: Any, key: Any) -> bool:
    """Whether ``x`` still matches ``key``: the same object, an array for an array, or tuple items.

    The one rule of "is this change structural", asked by ``same_structure``,
    ``StructureSnapshot.unchanged`` and the fast path's generated checks.
    """
    if x is key:
        return True
    t = type(key)
    if t is ArrayItem:
        return REGISTRY.kind_of(x) is ARRAY
    return (
        t is TupleItem
        and type(x) is tuple
        and len(x) == len(key.items)
        and all(map(same_item, x, key.items))
    )


def same_structure(old: object, new: object) -> bool:
    """Whether replacing ``old`` by ``new`` leaves the graph structure unchanged (``same_item``)."""
    return old is new or same_item(new, item_key(old))


def _collect_containers(x: Any, lists: list[Any], dicts: list[Any]) -> None:
    kind = REGISTRY.kind_of(x)
    if kind is SEQUENCE:
        if type(x) is list:
            lists.append(x)
        for c in x:
            _collect_containers(c, lists, dicts)
    elif kind is DICT:
        dicts.append(x)
        for c in x.values():
            _collect_containers(c, lists, dicts)
