"""Flax's ``graphlib`` records and markers that flaxgraph's engine does not use.

Node-impl records (``NodeImplBase``, ``PytreeNodeImpl``, ``PYTREE_NODE_IMPL``), markers,
type aliases, ``jax_to_nnx_path`` and ``graph_pop``; ``table.py`` puts them at
``flaxgraph.graphlib``. Source: Flax NNX 0.12.8 ``flax.nnx.graphlib`` (its public source).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Generic, NamedTuple, TypeVar, Union

import jax
import numpy as np

from flaxgraph.graphlib.graphdefs import NodeDef, NodeRef, TreeNodeDef, VariableDef
from flaxgraph.graphlib.inplace import pop
from flaxgraph.graphlib.ref_outputs import ArrayRefOutput, NoUpdate
from flaxgraph.graphlib.registry import (
    flatten_pytree,
    unflatten_pytree,
)
from flaxgraph.statelib import State
from flaxgraph.typing import Key, PathParts
from flaxgraph.variablelib import Variable

A = TypeVar("A")

Names = Sequence[int]
"""A sequence of reference indices."""

LeafType = Union[Variable[object], jax.Array, np.ndarray, ArrayRefOutput, NoUpdate]
"""What a State leaf can be."""

NO_UPDATE = NoUpdate()
"""The leaf of a Ref-backed Variable that needs no write on the way out."""


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True, slots=True)
class Repeated:
    """Flax's marker of a repeated leaf (static under JAX transforms)."""


REPEATED = Repeated()


@dataclasses.dataclass(frozen=True, slots=True)
class NodeAttr:
    """Flax's marker: an attribute holding a node."""


NODE_ATTR = NodeAttr()


@dataclasses.dataclass(frozen=True, slots=True)
class LeafAttr:
    """Flax's marker: an attribute holding a leaf."""


LEAF_ATTR = LeafAttr()


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True, slots=True)
class Static(Generic[A]):
    """A pytree with no leaves holding ``value`` (hashable) as static data.

    >>> import jax
    >>> jax.tree.leaves(Static(3)), jax.tree.map(lambda x: x, Static(3)) == Static(3)
    ([], True)
    """

    value: A


AttrType = Union[NodeAttr, LeafAttr, Static[object]]
"""What an attribute of a Flax node definition can hold."""


@dataclasses.dataclass(frozen=True, slots=True)
class DataElem:
    """Marks a node's child as data (``value`` is the child)."""

    value: object


@dataclasses.dataclass(frozen=True, slots=True)
class StaticElem:
    """Marks a node's child as static (``value`` is the child)."""

    value: object


@dataclasses.dataclass(frozen=True)
class ArrayRefDef:
    """Flax's record of a raw ``jax.Ref`` in a GraphDef, with Flax's fields (unused here)."""

    index: int
    outer_index: int | None

    def with_no_outer_index(self) -> ArrayRefDef:
        return ArrayRefDef(self.index, None)

    def with_same_outer_index(self) -> ArrayRefDef:
        return ArrayRefDef(self.index, self.index)


NodeDefType = Union[NodeDef, NodeRef, VariableDef, ArrayRefDef, TreeNodeDef]
"""The definition records a GraphDef is made of."""


class GenericPytree:
    """Stands for "any JAX pytree node" where a node type is asked for."""


class IndexesPytreeDef(NamedTuple):
    """The aux data of :data:`PYTREE_NODE_IMPL`'s flatten: keys' original positions, the treedef."""

    key_index: Mapping[Key, int]
    treedef: object


@dataclasses.dataclass(frozen=True, slots=True)
class NodeImplBase:
    """What every node implementation has: the type and ``flatten(node) -> (children, aux)``."""

    type: type
    flatten: Callable[[Any], tuple[Sequence[tuple[Key, Any]], Any]]

    def node_dict(self, node: object) -> dict[Key, object]:
        """The node's children by key (markers unwrapped)."""
        children, _ = self.flatten(node)
        return {k: v.value if isinstance(v, DataElem | StaticElem) else v for k, v in children}


@dataclasses.dataclass(frozen=True, slots=True)
class PytreeNodeImpl(NodeImplBase):
    """A container type walked by value: ``unflatten(children, aux)`` rebuilds it."""

    unflatten: Callable[[Sequence[tuple[Key, Any]], Any], Any]
    set_key: Callable[[Any, Key, Any], None] | None
    pop_key: Callable[[Any, Key], Any] | None


def jax_to_nnx_path(jax_path: tuple[Any, ...], /) -> PathParts:
    """A JAX key path as a flaxgraph path (``SequenceKey(i)`` -> ``i``, ``DictKey(k)`` -> ``k``…).

    Raises:
      ValueError: a ``DictKey``'s key is not hashable.

    >>> import jax
    >>> path = jax.tree_util.tree_flatten_with_path({'a': [0, 1]})[0][1][0]
    >>> jax_to_nnx_path(path)
    ('a', 1)
    """
    parts: list[Key] = []
    for entry in jax_path:
        if isinstance(entry, jax.tree_util.SequenceKey):
            parts.append(entry.idx)
        elif isinstance(entry, (jax.tree_util.DictKey, jax.tree_util.FlattenedIndexKey)):
            if not isinstance(entry.key, Hashable):
                raise ValueError(f"Invalid key: {entry.key!r} (not hashable)")
            parts.append(entry.key)
        elif isinstance(entry, jax.tree_util.GetAttrKey):
            parts.append(entry.name)
        else:
            parts.append(str(entry))
    return tuple(parts)


def _sorted_pytree_children(
    pytree: object,
) -> tuple[list[tuple[Key, object]], IndexesPytreeDef]:
    children, treedef = flatten_pytree(pytree)
    key_index = {key: i for i, (key, _) in enumerate(children)}
    return sorted(children, key=lambda kv: (type(kv[0]).__name__, kv[0])), IndexesPytreeDef(
        key_index, treedef
    )


def _unsorted_pytree(children: Sequence[tuple[Key, Any]], aux: IndexesPytreeDef) -> Any:
    ordered = sorted(children, key=lambda kv: aux.key_index[kv[0]])
    return unflatten_pytree(list(ordered), aux.treedef)


PYTREE_NODE_IMPL = PytreeNodeImpl(
    type=GenericPytree,
    flatten=_sorted_pytree_children,
    unflatten=_unsorted_pytree,
    set_key=None,
    pop_key=None,
)
"""The implementation of any JAX pytree node: children sorted by key, rebuilt in JAX's order."""


def graph_pop(node: object, filters: tuple[object, ...]) -> tuple[State, ...]:
    """``nnx.pop(node, *filters)`` as a tuple of States, one per filter; raises as ``nnx.pop``."""
    popped = pop(node, *filters)
    return popped if isinstance(popped, tuple) else (popped,)
