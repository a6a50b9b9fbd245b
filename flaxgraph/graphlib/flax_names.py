"""Flax's ``graphlib`` names that belong to its own engine, at Flax's path.

Flax NNX's ``graphlib`` module holds, besides the API (``split``, ``merge``, ``GraphDef``…,
which flaxgraph defines in the files of this package), the records and registries of its
engine. This file gives each of those names a meaning in flaxgraph's engine:

* the questions a value can be asked (:func:`is_node`, :func:`is_pytree_node`,
  :func:`is_graph_node`, :func:`is_node_type`, :func:`get_node_impl`…), answered as Flax
  answers them (``None`` is an empty pytree node, a Variable a graph node and no node),
  from the registered graph node types and JAX's pytree registry; the engine itself
  decides with its own classification (``registry.REGISTRY.kind_of``), which agrees with
  these wherever ``split``'s results can tell;
* Flax's pytree registry (:data:`PYTREE_REGISTRY`: ``list``, ``tuple``, ``dict``,
  ``State``, ``NoneType``);
* :func:`register_pytree_node_type`, which makes a container type walked by value (a JAX
  pytree node with keys), and its registry :data:`PYTREE_REGISTRY`;
* Flax's small records and markers (``NodeAttr``, ``Static``, ``DataElem``…) and type
  aliases (``LeafType``, ``NodeDefType``…);
* the state of Flax's own caching (``GRAPH_CONTEXT``, ``static_cache``, ``StaticCache``…),
  which flaxgraph does not have (its transforms cache by the fast path), as stand-ins
  (:mod:`flaxgraph.stand_ins`).

Source: Flax NNX 0.12.8 ``flax.nnx.graphlib`` (its module map, behaviour read from its public
source).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Hashable, Iterable, Mapping, MutableMapping, Sequence
from typing import Any, Generic, NamedTuple, TypeVar, Union

import jax
import numpy as np

from flaxgraph.graphlib.graphdefs import NodeDef, NodeRef, TreeNodeDef, VariableDef
from flaxgraph.graphlib.inplace import pop
from flaxgraph.graphlib.ref_outputs import ArrayRefOutput, NoUpdate
from flaxgraph.graphlib.refmap import RefMap
from flaxgraph.graphlib.registry import (
    REF,
    REGISTRY,
    VARIABLE,
    GraphNodeImpl,
    flatten_pytree,
    unflatten_pytree,
)
from flaxgraph.stand_ins import internal_class, internal_function, internal_object
from flaxgraph.statelib import FlatState, State
from flaxgraph.typing import Key, PathParts
from flaxgraph.variablelib import Variable

A = TypeVar("A")

Index = int
"""A reference index in a GraphDef."""
Names = Sequence[int]
"""A sequence of reference indices."""

LeafType = Union[Variable[object], jax.Array, np.ndarray, ArrayRefOutput, NoUpdate]
"""What a State leaf can be."""
GraphFlatState = FlatState
"""A ``FlatState`` of graph leaves."""

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
    """A pytree with no leaves holding ``value`` as static data (``value`` must be hashable).

    Example::

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
    """Flax's definition record of a raw ``jax.Ref`` in a GraphDef. flaxgraph's GraphDefs
    do not use it (a raw Ref is a leaf of its own kind); it exists with Flax's fields."""

    index: int
    outer_index: int | None

    def with_no_outer_index(self) -> ArrayRefDef:
        return ArrayRefDef(self.index, None)

    def with_same_outer_index(self) -> ArrayRefDef:
        return ArrayRefDef(self.index, self.index)


NodeDefType = Union[NodeDef, NodeRef, VariableDef, ArrayRefDef, TreeNodeDef]
"""The definition records a GraphDef is made of."""


class GenericPytree:
    """Stands for "any JAX pytree node" where a node type is asked for
    (``get_node_impl_for_type(GenericPytree)``)."""


class IndexesPytreeDef(NamedTuple):
    """The aux data of :data:`PYTREE_NODE_IMPL`'s flatten: each key's original position and
    the JAX treedef."""

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


NodeImpl = Union[GraphNodeImpl, PytreeNodeImpl]
"""A graph node's or a pytree node's implementation."""

GRAPH_REGISTRY = REGISTRY.node_impls()
"""The graph node types and their ``GraphNodeImpl`` (``register_graph_node_type`` fills it)."""


def _by_position(seq: Sequence[object]) -> tuple[list[tuple[Key, object]], None]:
    return list(enumerate(seq)), None


def _by_sorted_key(mapping: Mapping[Key, object]) -> tuple[list[tuple[Key, object]], None]:
    return sorted(mapping.items()), None


def _set_item(container: MutableMapping[Key, object], key: Key, value: object) -> None:
    container[key] = value


def _pop_item(container: MutableMapping[Key, object], key: Key) -> object:
    return container.pop(key)


def _builtin_pytree_impls() -> dict[type, PytreeNodeImpl]:
    """The container types Flax's graph functions know from the start, each with Flax's
    flatten (lists and tuples by position, dicts and States by sorted key, ``None`` with
    no children) and unflatten."""
    return {
        list: PytreeNodeImpl(
            list, _by_position, lambda nodes, _: [v for _, v in nodes], _set_item, None
        ),
        tuple: PytreeNodeImpl(
            tuple, _by_position, lambda nodes, _: tuple(v for _, v in nodes), None, None
        ),
        dict: PytreeNodeImpl(
            dict, _by_sorted_key, lambda nodes, _: dict(nodes), _set_item, _pop_item
        ),
        State: PytreeNodeImpl(
            State,
            lambda state: _by_sorted_key(state.raw_mapping),
            lambda nodes, _: State(dict(nodes)),
            _set_item,
            _pop_item,
        ),
        type(None): PytreeNodeImpl(
            type(None), lambda _: ([], None), lambda nodes, _: None, None, None
        ),
    }


PYTREE_REGISTRY: dict[type, PytreeNodeImpl] = _builtin_pytree_impls()
"""The container types with their own ``PytreeNodeImpl``: ``list``, ``tuple``, ``dict``,
``State`` and ``NoneType`` (as in Flax NNX 0.12.8), and those
:func:`register_pytree_node_type` registered."""

PythonRefMap = RefMap
"""Flax's name of the pure-Python ``RefMap`` (flaxgraph has only that one)."""


def jax_to_nnx_path(jax_path: tuple[Any, ...], /) -> PathParts:
    """A JAX key path as a flaxgraph path: ``SequenceKey(i)`` -> ``i``, ``DictKey(k)`` and
    ``FlattenedIndexKey(k)`` -> ``k``, ``GetAttrKey(n)`` -> ``n``, anything else its ``str``.

    Raises:
      ValueError: a ``DictKey``'s key is not hashable.

    Example::

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


def register_pytree_node_type(
    type: type,
    flatten: Callable[[Any], tuple[Sequence[tuple[Key, Any]], Any]],
    unflatten: Callable[[Sequence[tuple[Key, Any]], Any], Any],
    *,
    set_key: Callable[[Any, Key, Any], None] | None = None,
    pop_key: Callable[[Any, Key], Any] | None = None,
) -> None:
    """Makes ``type`` a container walked by value: a JAX pytree node whose children have
    the keys ``flatten`` gives, so ``split`` paths, ``jax.tree`` functions and transforms
    see its children.

    Args:
      type: the container class.
      flatten: ``node -> ([(key, child), ...], aux)``; ``aux`` must be hashable.
      unflatten: ``([(key, child), ...], aux) -> node``.
      set_key, pop_key: Flax's optional in-place setters, kept in :data:`PYTREE_REGISTRY`.

    Raises:
      ValueError: ``type`` is already registered.

    Example::

      >>> import jax, flaxgraph as nnx
      >>> class Pair:
      ...   def __init__(self, a, b): self.a, self.b = a, b
      >>> register_pytree_node_type(
      ...   Pair, lambda p: ([('a', p.a), ('b', p.b)], None),
      ...   lambda children, _: Pair(*(v for _, v in children)))
      >>> jax.tree.leaves(Pair(1, 2))
      [1, 2]
    """
    if type in PYTREE_REGISTRY:
        raise ValueError(f"Node type {type} is already registered.")
    PYTREE_REGISTRY[type] = PytreeNodeImpl(type, flatten, unflatten, set_key, pop_key)

    def flatten_with_keys(
        node: object,
    ) -> tuple[list[tuple[object, object]], tuple[tuple[Key, ...], object]]:
        children, aux = flatten(node)
        keys = tuple(k for k, _ in children)
        return [(jax.tree_util.DictKey(k), v) for k, v in children], (keys, aux)

    def unflatten_keys(
        keys_aux: tuple[tuple[Key, ...], object], values: Iterable[object]
    ) -> object:
        keys, aux = keys_aux
        return unflatten(list(zip(keys, values, strict=True)), aux)

    jax.tree_util.register_pytree_with_keys(type, flatten_with_keys, unflatten_keys)


def _is_variable(x: object) -> bool:
    return REGISTRY.kind_of(x) is VARIABLE


def _is_jax_pytree_node(x: object) -> bool:
    """Whether JAX's registry makes ``x`` a pytree node (``None``, lists, tuples, named
    tuples, dicts, registered classes and dataclasses, ``pytree=True`` Objects), asked of
    the registry alone (no flatten)."""
    return isinstance(x, tuple) or not jax.tree_util.all_leaves((x,))


def is_pytree_node(x: object, *, check_graph_registry: bool = True) -> bool:
    """Whether ``x`` is a JAX pytree node that is neither a Variable nor (by default) a
    graph node: ``None``, a list, tuple (named tuples and other tuple subclasses included),
    dict, ``State``, a class registered with JAX (``register_pytree_node``,
    ``register_dataclass``, ``register_static``) or with :func:`register_pytree_node_type`.

    Args:
      x: any value.
      check_graph_registry: when true (the default) a graph node (an Object, a Module,
        ``Rngs``, ``nnx.List``…) is no pytree node; when false, a graph node whose class
        is also a JAX pytree (``pytree=True``, the default) is one.

    Returns:
      ``bool``; ``False`` for Variables, arrays, scalars, strings, plain objects.

    Example::

      >>> import flaxgraph as nnx
      >>> is_pytree_node(None), is_pytree_node([1]), is_pytree_node(nnx.Param(1))
      (True, True, False)
      >>> m = nnx.Dict(a=1)
      >>> is_pytree_node(m), is_pytree_node(m, check_graph_registry=False)
      (False, True)

    Source: Flax NNX 0.12.8 ``flax.nnx.graphlib.is_pytree_node`` (same answers;
    tests/graphlib/test_flax_node_questions.py compares them).
    """
    if check_graph_registry and type(x) in GRAPH_REGISTRY:
        return False
    return not _is_variable(x) and _is_jax_pytree_node(x)


def is_node(x: object) -> bool:
    """Whether ``x`` has children Flax's graph functions visit: a graph node (an Object, a
    Module, ``Rngs``, ``nnx.List``…) or a pytree node (:func:`is_pytree_node`, ``None``
    included); ``False`` for a Variable and for leaves.

    This is Flax's question, not flaxgraph's classification: ``split`` holds ``None`` in
    the GraphDef as a constant, which Flax's walk reaches as an empty pytree; both end in
    the GraphDef and the State is the same.

    Example::

      >>> import flaxgraph as nnx
      >>> [is_node(v) for v in (nnx.Dict(), [1], None, nnx.Param(1), 3)]
      [True, True, True, False, False]

    Source: Flax NNX 0.12.8 ``flax.nnx.graphlib.is_node`` (same answers).
    """
    if _is_variable(x):
        return False
    return type(x) in GRAPH_REGISTRY or is_pytree_node(x)


def is_graph_node(x: object) -> bool:
    """Whether ``x`` is a reference-semantics node of Flax's graph: a graph node (an
    Object, a Module, ``Rngs``…), a Variable or a raw ``jax.Ref``. The usual
    ``is_leaf=`` of a ``jax.tree`` function that stops at Modules and Variables.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> [is_graph_node(v) for v in (nnx.Dict(), nnx.Param(1), [1], jnp.ones(1))]
      [True, True, False, False]

    Source: Flax NNX 0.12.8 ``flax.nnx.graphlib.is_graph_node`` (same answers).
    """
    return type(x) in GRAPH_REGISTRY or REGISTRY.kind_of(x) in (VARIABLE, REF)


def is_node_module(x: object) -> bool:
    """Whether ``type(x)`` is a registered graph node type (an Object, a Module…)."""
    return type(x) in GRAPH_REGISTRY


def is_node_type(x: type) -> bool:
    """Whether instances of ``x`` are nodes: a registered graph node type, a type in
    :data:`PYTREE_REGISTRY` (``list``, ``tuple``, ``dict``, ``State``, ``NoneType`` and
    those given to :func:`register_pytree_node_type`), or :class:`GenericPytree`."""
    return x in GRAPH_REGISTRY or x in PYTREE_REGISTRY or x is GenericPytree


def is_node_leaf(x: object) -> bool:
    """Whether ``x`` is a State leaf: a Variable, an array (NumPy or JAX, key arrays and
    tracers included), a ``jax.Ref``, an ``ArrayRefOutput`` or ``NoUpdate``.

    Source: Flax NNX 0.12.8 ``flax.nnx.graphlib.is_node_leaf`` (same answers).
    """
    if isinstance(x, (ArrayRefOutput, NoUpdate, jax.Array, np.ndarray)):
        return True
    return REGISTRY.kind_of(x) in (VARIABLE, REF)


def get_node_impl(x: object) -> GraphNodeImpl | PytreeNodeImpl | None:
    """The implementation Flax's graph functions walk ``x`` with.

    Returns:
      ``None`` for a Variable; the graph node type's ``GraphNodeImpl`` (flaxgraph's,
      see ``GRAPH_REGISTRY``) for a graph node; the :data:`PYTREE_REGISTRY` entry of
      ``type(x)`` (``list``, ``tuple``, ``dict``, ``State``, ``NoneType`` or a type given
      to :func:`register_pytree_node_type`); :data:`PYTREE_NODE_IMPL` for any other pytree
      node (:func:`is_pytree_node`); ``None`` for a leaf.

    Example::

      >>> import flaxgraph as nnx
      >>> get_node_impl([1]).type, get_node_impl(None).type, get_node_impl(3)
      (<class 'list'>, <class 'NoneType'>, None)
      >>> get_node_impl([1, 2]).flatten([1, 2])
      ([(0, 1), (1, 2)], None)

    Source: Flax NNX 0.12.8 ``flax.nnx.graphlib.get_node_impl`` (same answers).
    """
    if _is_variable(x):
        return None
    node_type = type(x)
    if node_type in GRAPH_REGISTRY:
        return GRAPH_REGISTRY[node_type]
    if node_type in PYTREE_REGISTRY:
        return PYTREE_REGISTRY[node_type]
    return PYTREE_NODE_IMPL if _is_jax_pytree_node(x) else None


def get_node_impl_for_type(x: type) -> GraphNodeImpl | PytreeNodeImpl | None:
    """The implementation registered for the type ``x`` (``PYTREE_NODE_IMPL`` for
    :class:`GenericPytree`), or ``None``."""
    if x is GenericPytree:
        return PYTREE_NODE_IMPL
    return PYTREE_REGISTRY.get(x) or GRAPH_REGISTRY.get(x)


def graph_pop(node: object, filters: tuple[object, ...]) -> tuple[State, ...]:
    """``nnx.pop(node, *filters)`` as a tuple of States, one per filter.

    Raises:
      As ``nnx.pop``.
    """
    popped = pop(node, *filters)
    return popped if isinstance(popped, tuple) else (popped,)


def cached_partial(f: Callable[..., Any], *cached_args: object, **options: object) -> Any:
    """``f`` with its first arguments bound to ``cached_args`` (``nnx.cached_partial``).

    A flaxgraph-transformed ``f`` binds them keeping its compiled functions and fast-path
    plans (its ``partial`` method), so the bound objects' traversal is cached; any other
    callable is bound with ``functools.partial``. ``graph``/``graph_updates`` are accepted
    for Flax compatibility (the mode of ``f`` applies).
    """
    del options
    bind = getattr(f, "partial", None)
    return bind(*cached_args) if callable(bind) else functools.partial(f, *cached_args)


_HERE = "flaxgraph.graphlib"  # the stand-ins are names of Flax's graphlib module
GraphContext = internal_class(_HERE, "GraphContext", "nnx.split_context / nnx.update_context")
GRAPH_CONTEXT = internal_object(_HERE, "GRAPH_CONTEXT", "nnx.split_context / nnx.update_context")
StaticCache = internal_class(_HERE, "StaticCache", "nnx.cached_partial")
static_cache = internal_function(_HERE, "static_cache", "nnx.cached_partial")
UpdateContextManager = internal_class(_HERE, "UpdateContextManager", "nnx.update_context")
