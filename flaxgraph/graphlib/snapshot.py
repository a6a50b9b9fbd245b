"""A structure snapshot: enough of a graph's state to tell, later and without a walk,
whether its structure (its GraphDef) is still the same.

The structure of a graph changes only through

* a structural assignment on an Object (a new, deleted or replaced node or static
  attribute), which bumps the Object's *structure version* (``objects.py``);
* a Variable's metadata, which is replaced, never mutated in place
  (``variables.py``);
* a list or dict inside the graph gaining, losing or replacing an item (an
  array item replaced by another array of the same type is a new value, not a
  new structure, as for an array attribute of an Object).

So comparing every Object's version, every Variable's metadata and every list's and
dict's items with the snapshot is the same as comparing GraphDefs, at the cost of a
few C-level passes. A graph holding nodes of other registered types (which keep no
version) is never considered unchanged.

Source: ``docs/design.md``, "The fast path" (structure versions).
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
    """The structure of the graph made of ``nodes`` (its Objects and Variables, e.g. a
    walk's reference index), as it is now.

    Attributes:
      objects, versions: the Objects and their structure versions.
      variables, metadata: the Variables and their metadata dicts.
      lists, list_items: the lists inside the Objects (nested in lists, tuples and
        dicts) and their items (an ``ArrayItem`` for an array item).
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
        """Whether the graph still has the snapshot's structure (a Variable's metadata
        may have been replaced by an equal dict: the GraphDef is the same)."""
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
    """What a snapshot keeps of an array item of a list or dict: its type (another
    array in its place keeps the structure; the fast path's generated checks
    expect this type)."""

    type: type


class TupleItem(NamedTuple):
    """What a snapshot keeps of a tuple item of a list or dict: its items' keys (a
    tuple is a value: the fast path rebuilds one around a new array, so it is
    compared item by item, not by identity)."""

    items: tuple[Any, ...]


def item_key(x: Any) -> Any:
    """What a snapshot compares for an item of a list or dict: an ``ArrayItem`` for
    an array (Tracers included), a ``TupleItem`` for a plain tuple, the item itself
    (by identity) otherwise."""
    kind = REGISTRY.kind_of(x)
    if kind is ARRAY:
        return ArrayItem(type(x))
    if type(x) is tuple:
        return TupleItem(tuple(map(item_key, x)))
    return x


def same_item(x: Any, key: Any) -> bool:
    """Whether the item ``x`` still matches its snapshot ``key`` (``item_key``): the
    same object, an array where there was one (an ``ARRAY`` of the engine's
    classification, of any array type), or a tuple whose items match.

    This is the one rule of "is this change structural": ``same_structure`` (an
    Object's attribute assignment, ``pytreelib/objects.py``, ``nnx.List`` items) asks
    it with the old value's key, ``StructureSnapshot.unchanged`` with the snapshot's
    keys, and the fast path's generated checks (``transforms/plan_code.py``
    ``_item_check``) call it wherever their quick test (the same array type) does
    not already say "unchanged"."""
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
    """True when replacing ``old`` by ``new`` leaves the graph structure unchanged:
    ``same_item(new, item_key(old))`` (the same object, an array where there was one,
    or a plain tuple of the same length whose items are each unchanged in this
    sense: ``self.a = (self.a[0] + 1, None)`` is a new value, as for an array
    attribute)."""
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
