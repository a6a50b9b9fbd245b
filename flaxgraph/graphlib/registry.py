"""Which values are graph nodes, which are containers, and which are leaves.

The graph engine sorts every value it meets into one of five kinds:

* **graph nodes**: reference-semantics objects (``Object``/``Module`` and any type
  registered with ``register_graph_node_type``). Identity matters: a node seen
  twice is stored once and referenced afterwards (shared references, cycles).
* **Variables**: nodes whose value is a state leaf; identity matters too.
* **containers**: ``list``, ``tuple``, ``dict`` and any other JAX pytree node
  (named tuples, optax states…). They are walked through by value, like JAX
  walks pytrees; two attributes holding the same list get two lists back.
* **array leaves**: ``jax.Array``, ``np.ndarray``, numpy scalars and
  ``jax.ShapeDtypeStruct``: they go into the ``State``.
* **static values**: everything else (ints, strings, functions, ``None``…). They
  are stored in the ``GraphDef`` and so must be hashable.

Graph-node types are registered with a ``GraphNodeImpl`` telling the engine how
to list a node's children, build an empty node and fill it. ``Object`` registers
itself (and every subclass) this way, which keeps this layer free of any import
from the object model.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Hashable, Iterable
from typing import Any

import jax
import numpy as np

from flaxgraph.typing import Key
from flaxgraph.variablelib.variable import Variable


@dataclasses.dataclass(frozen=True)
class GraphNodeImpl:
    """How the engine handles one graph-node type.

    Attributes:
      type: the node's class.
      flatten: ``node -> (items, metadata)``; ``items`` is an iterable of
        ``(key, child)`` pairs in a deterministic order, ``metadata`` a hashable
        value stored in the GraphDef (``None`` if there is none).
      create_empty: ``(metadata, trace) -> node``: a new node with no children, made
        without calling ``__init__``; ``trace`` is the current JAX trace token (a
        one-argument function is accepted too).
      set_items: ``(node, items, metadata) -> None``: makes ``node``'s children
        exactly ``items`` (used both to fill a new node and to update an existing
        one in place).
      get_child: ``(node, key) -> child`` or ``MISSING``.
      set_child: ``(node, key, value) -> None``: adds or replaces one child.
      del_child: ``(node, key) -> None``: removes one child.
    """

    type: type
    flatten: Callable[[Any], tuple[Iterable[tuple[Key, Any]], Hashable]]
    create_empty: Callable[..., Any]  # (metadata, trace) -> node
    set_items: Callable[[Any, list[tuple[Key, Any]], Hashable], None]
    get_child: Callable[[Any, Key], Any]
    set_child: Callable[[Any, Key, Any], None]
    del_child: Callable[[Any, Key], None]


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""Returned by ``GraphNodeImpl.get_child`` for a key the node does not have."""


class DataLeaf:
    """Marks a child that a node's ``flatten`` wants in the State even though it is
    not an array (``nnx.data(3)``)."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


class StaticLeaf:
    """Marks a child that a node's ``flatten`` wants in the GraphDef even though it
    would otherwise be walked (``nnx.static([...])`` is still rejected if unhashable)."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


# The registry of graph-node types, written only through
# `register_graph_node_type` (like JAX's pytree registry).
GRAPH_NODE_IMPLS: dict[type, GraphNodeImpl] = {}


def register_graph_node_type(
    type: type,
    flatten: Callable[[Any], tuple[Iterable[tuple[Key, Any]], Hashable]],
    create_empty: Callable[[Hashable], Any],
    set_items: Callable[[Any, list[tuple[Key, Any]], Hashable], None],
    get_child: Callable[[Any, Key], Any],
    set_child: Callable[[Any, Key, Any], None],
    del_child: Callable[[Any, Key], None],
) -> None:
    """Registers ``type`` as a reference-semantics graph node (see ``GraphNodeImpl``).

    ``Object`` and its subclasses are registered automatically; use this for other
    mutable classes that should keep reference semantics through transforms.
    """
    if len(inspect.signature(create_empty).parameters) < 2:
        user_create = create_empty

        def create_empty(metadata: Hashable, trace: object = None) -> Any:
            return user_create(metadata)

    GRAPH_NODE_IMPLS[type] = GraphNodeImpl(
        type, flatten, create_empty, set_items, get_child, set_child, del_child
    )


def get_graph_node_impl(x: Any) -> GraphNodeImpl | None:
    """Returns the impl registered for ``type(x)`` exactly, or ``None``."""
    return GRAPH_NODE_IMPLS.get(type(x))


def is_graph_node(x: Any) -> bool:
    """True for registered graph nodes (Objects, Modules…), not Variables."""
    return type(x) in GRAPH_NODE_IMPLS


def is_node_or_variable(x: Any) -> bool:
    """True for values whose identity the engine tracks: graph nodes and Variables."""
    return type(x) in GRAPH_NODE_IMPLS or isinstance(x, Variable)


ARRAY_TYPES: tuple[type[Any], ...] = (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct)
PLAIN_STATIC = frozenset({int, float, str, bool, complex, bytes, type(None), type(Ellipsis)})
BUILTIN_CONTAINERS = frozenset({list, tuple, dict})


def is_array_leaf(x: Any) -> bool:
    """True for values stored in a State as raw leaves (arrays and array-likes)."""
    return isinstance(x, ARRAY_TYPES)


def pytree_children(x: Any) -> tuple[list[tuple[Key, Any]], Any] | None:
    """One level of a non-builtin pytree node: ``([(key, child)], treedef)``, or
    ``None`` if ``x`` is a pytree leaf (then it is a static value)."""
    if type(x) in PLAIN_STATIC:
        return None
    treedef: Any  # a PyTreeDef (jaxlib ships no stub for it)
    with_path, treedef = jax.tree_util.tree_flatten_with_path(x, is_leaf=lambda y: y is not x)
    if jax.tree_util.treedef_is_leaf(treedef) and treedef.num_leaves == 1:
        return None
    return [(_key_of(path[0]), child) for path, child in with_path], treedef


def flatten_pytree(x: Any) -> tuple[list[tuple[Key, Any]], Any]:
    """One level of the pytree node ``x``: ``([(key, child), ...], treedef)``; the
    inverse of ``unflatten_pytree``. (Flax NNX 0.12's private ``graphlib``
    helper; aux data such as ``struct.field(pytree_node=False)`` stays in ``treedef``.)

    Raises:
      ValueError: ``x`` is a pytree leaf, not a node.
    """
    found = pytree_children(x)
    if found is None:
        raise ValueError(
            f"A {type(x).__name__} is a pytree leaf, not a pytree node: it has no children."
        )
    return found


def unflatten_pytree(children: list[tuple[Key, Any]], treedef: Any) -> Any:
    """Rebuilds the node ``flatten_pytree`` took apart, from ``(key, child)`` pairs."""
    return treedef.unflatten([child for _, child in children])


def _key_of(entry: Any) -> Key:
    for attr in ("name", "key", "idx"):
        if hasattr(entry, attr):
            return getattr(entry, attr)
    return str(entry)


def is_hashable(x: Any) -> bool:
    """Whether ``hash(x)`` works (what a static value or a cache key needs)."""
    try:
        hash(x)
    except TypeError:
        return False
    return True


def is_plain_static(x: Any) -> bool:
    """True for ints, floats, strings, bools, ``None``… (always static, never walked)."""
    return type(x) in PLAIN_STATIC
