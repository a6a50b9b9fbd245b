"""GraphDef: the frozen, hashable description of a graph's structure.

``split`` turns an object graph into a ``GraphDef`` (everything but the state
leaves) and a ``State`` (the leaves). A GraphDef is a tree of small immutable
definitions, one per value met in a depth-first walk:

=================  ======================================================
definition         stands for
=================  ======================================================
``NodeDef``        a graph node (an Object) seen for the first time: its
                   type, reference index, metadata and children by key
``VariableDef``    a Variable seen for the first time: kind, index, metadata;
                   its value is the next leaf of the State
``NodeRef``        a node or Variable seen before: the index to reuse
``ContainerDef``   a list, tuple, dict or other pytree node, walked by value
``ArrayDef``       a raw array leaf; its value is the next leaf of the State
``StaticDef``      a static value (int, str, function…), stored here
=================  ======================================================

Two GraphDefs are equal when the structures are equal, so a GraphDef can be a
static argument of ``jax.jit`` and a cache key; its hash is computed once.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Union


class _Def:
    __slots__ = ("_hash",)
    _fields: tuple[str, ...] = ()

    def _key(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f) for f in self._fields)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not type(self):
            return False
        if self.__hash__() != other.__hash__():
            return False
        return self._key() == other._key()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        try:
            return self._hash  # type: ignore[no-any-return]
        except AttributeError:
            h = hash((type(self).__name__, self._key()))
            object.__setattr__(self, "_hash", h)
            return h

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __repr__(self) -> str:
        fields = ", ".join(f"{f}={_short(getattr(self, f))}" for f in self._fields)
        return f"{type(self).__name__}({fields})"

    def __reduce__(self) -> Any:
        # The constructor takes the fields (`_key` may differ, e.g. StaticDef's).
        return (type(self), tuple(getattr(self, f) for f in self._fields))


def _short(x: Any) -> str:
    if isinstance(x, type):
        return x.__name__
    return repr(x)


def _init(self: _Def, **values: Any) -> None:
    for name, value in values.items():
        object.__setattr__(self, name, value)


class NodeDef(_Def):
    """A graph node seen for the first time (index ``index`` in this GraphDef)."""

    __slots__ = ("type", "index", "metadata", "attributes")
    _fields = ("type", "index", "metadata", "attributes")

    def __init__(
        self,
        type: type,
        index: int,
        metadata: Hashable,
        attributes: tuple[tuple[Hashable, Def], ...],
    ):
        _init(self, type=type, index=index, metadata=metadata, attributes=attributes)


class VariableDef(_Def):
    """A Variable seen for the first time; its value is the next State leaf."""

    __slots__ = ("type", "index", "metadata")
    _fields = ("type", "index", "metadata")

    def __init__(self, type: type, index: int, metadata: tuple[tuple[str, Any], ...]):
        _init(self, type=type, index=index, metadata=metadata)


class NodeRef(_Def):
    """A node or Variable seen before in the walk: reuse the object at ``index``."""

    __slots__ = ("type", "index")
    _fields = ("type", "index")

    def __init__(self, type: type, index: int):
        _init(self, type=type, index=index)


class ContainerDef(_Def):
    """A list/tuple/dict (``type``) or another pytree node (``treedef``), by value."""

    __slots__ = ("type", "keys", "children", "treedef")
    _fields = ("type", "keys", "children", "treedef")

    def __init__(
        self,
        type: type,
        keys: tuple[Hashable, ...],
        children: tuple[Def, ...],
        treedef: Any = None,
    ):
        _init(self, type=type, keys=keys, children=children, treedef=treedef)


class ArrayDef(_Def):
    """A raw array leaf; its value is the next State leaf."""

    __slots__ = ()
    _fields = ()

    def __repr__(self) -> str:
        return "ArrayDef()"


class StaticDef(_Def):
    """A static value kept in the GraphDef (must be hashable)."""

    __slots__ = ("value",)
    _fields = ("value",)

    def __init__(self, value: Any):
        _init(self, value=value)

    def _key(self) -> tuple[Any, ...]:
        # `1 == True == 1.0` in Python; a GraphDef must still tell them apart.
        return (type(self.value), self.value)


Def = Union[NodeDef, VariableDef, NodeRef, ContainerDef, ArrayDef, StaticDef]
ARRAY_DEF = ArrayDef()


class GraphDef(_Def):
    """The structure of a graph: a root definition plus the number of State leaves.

    Immutable, hashable (hash computed once) and equal to any GraphDef of the same
    structure, so it can be passed as a static argument to ``jax.jit``.

    Attributes:
      root: the definition of the root value.
      leaf_paths: the path of every State leaf, in the order ``merge`` consumes
        them (derived from ``root``; kept to match States by path quickly).

    Source: Flax NNX ``GraphDef`` (split/merge design).
    """

    __slots__ = ("root", "leaf_paths")
    _fields = ("root", "leaf_paths")

    def __init__(self, root: Def, leaf_paths: tuple[tuple[Hashable, ...], ...]):
        _init(self, root=root, leaf_paths=leaf_paths)

    @property
    def num_leaves(self) -> int:
        return len(self.leaf_paths)

    @property
    def type(self) -> type:
        """The type of the root value."""
        return self.root.type if hasattr(self.root, "type") else type(None)

    def __repr__(self) -> str:
        from flaxgraph.display import graphdef_repr

        return graphdef_repr(self)

    def apply(self, state: Any, *states: Any) -> Any:
        """Returns a proxy: ``graphdef.apply(state).method(*args)`` merges, calls the
        method, and returns ``(output, (graphdef, state))`` after the call."""
        from flaxgraph.graph.api import call

        return call((self, state, *states))
