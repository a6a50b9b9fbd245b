"""A structure snapshot: enough of a graph's state to tell, later and without a walk,
whether its structure (its GraphDef) is still the same.

The structure of a graph changes only through

* a structural assignment on an Object (a new, deleted or replaced node or static
  attribute), which bumps the Object's *structure version* (``objects.py``);
* a Variable's metadata, which is replaced, never mutated in place
  (``variables.py``);
* a list or dict inside the graph gaining, losing or replacing an item.

So comparing every Object's version, every Variable's metadata and every list's and
dict's items with the snapshot is the same as comparing GraphDefs, at the cost of a
few C-level passes. A graph holding nodes of other registered types (which keep no
version) is never considered unchanged.

Source: ``docs/design.md``, "The fast path" (structure versions).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

from flaxgraph.graphlib.registry import GRAPH_NODE_IMPLS
from flaxgraph.variablelib.variable import Variable

_get_version = operator.attrgetter("_obj_version")
_get_metadata = operator.attrgetter("_var_metadata")
_is = operator.is_


class StructureSnapshot:
    """The structure of the graph made of ``nodes`` (its Objects and Variables, e.g. a
    walk's reference index), as it is now.

    Attributes:
      objects, versions: the Objects and their structure versions.
      variables, metadata: the Variables and their metadata dicts.
      lists, list_items: the lists inside the Objects (nested in lists, tuples and
        dicts) and their items.
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
        nodes = list(nodes)
        self.objects = [n for n in nodes if type(n) in GRAPH_NODE_IMPLS]
        self.versions = [getattr(o, "_obj_version", None) for o in self.objects]
        self.versioned = None not in self.versions
        self.variables = [n for n in nodes if isinstance(n, Variable)]
        self.metadata = [v._var_metadata for v in self.variables]
        lists: list[Any] = []
        dicts: list[Any] = []
        if self.versioned:  # Objects all: their attributes are their __dict__
            for obj in self.objects:
                for child in obj.__dict__.values():
                    _collect_containers(child, lists, dicts)
        self.lists, self.list_items = lists, [tuple(c) for c in lists]
        self.dicts, self.dict_items = dicts, [(tuple(d), tuple(d.values())) for d in dicts]

    def unchanged(self) -> bool:
        """Whether the graph still has the snapshot's structure (a Variable's metadata
        may have been replaced by an equal dict: the GraphDef is the same)."""
        if not self.versioned:
            return False
        if list(map(_get_version, self.objects)) != self.versions:
            return False
        if list(map(_get_metadata, self.variables)) != self.metadata:
            return False
        for c, items in zip(self.lists, self.list_items):
            if len(c) != len(items) or not all(map(_is, c, items)):
                return False
        for d, (keys, values) in zip(self.dicts, self.dict_items):
            if len(d) != len(keys) or tuple(d) != keys or not all(map(_is, d.values(), values)):
                return False
        return True


def _collect_containers(x: Any, lists: list[Any], dicts: list[Any]) -> None:
    t = type(x)
    if t is list:
        lists.append(x)
        for c in x:
            _collect_containers(c, lists, dicts)
    elif t is dict:
        dicts.append(x)
        for c in x.values():
            _collect_containers(c, lists, dicts)
    elif t is tuple:
        for c in x:
            _collect_containers(c, lists, dicts)
