"""Flax's node protocol: its registries and the questions asked of them (``is_node``…).

The answers come from the engine's registry (``GraphNodeImpl`` is a view of its
``NodeTypeImpl``): ``docs/design.md``, "What a value is". They match Flax's
(tests/graphlib/test_flax_node_questions.py asks both).
Source: Flax NNX 0.12.8 ``flax.nnx.graphlib`` (its public source).
"""

from __future__ import annotations

import dataclasses
from collections.abc import (
    Callable,
    Hashable,
    Iterable,
    Iterator,
    Mapping,
    MutableMapping,
    Sequence,
)
from typing import Any, Union

import jax
import numpy as np

from flaxgraph.flax_surface.graphlib_records import (
    PYTREE_NODE_IMPL,
    DataElem,
    GenericPytree,
    NodeImplBase,
    PytreeNodeImpl,
    StaticElem,
)
from flaxgraph.graphlib.ref_outputs import ArrayRefOutput, NoUpdate
from flaxgraph.graphlib.registry import (
    REF,
    REGISTRY,
    VARIABLE,
    DataLeaf,
    NodeTypeImpl,
    StaticLeaf,
    register_node_type,
)
from flaxgraph.statelib import State
from flaxgraph.typing import MISSING, Key


@dataclasses.dataclass(frozen=True, slots=True)
class GraphNodeImpl(NodeImplBase):
    """How Flax's graph functions handle one graph node type.

    Attributes:
      type: the node's class.
      flatten: ``node -> ([(key, child), ...], aux)``, sorted by key; a child may be
        wrapped in ``DataElem``/``StaticElem`` (an ``nnx.data``/``nnx.static`` mark).
      set_key: ``(node, key, value) -> None``: adds or replaces one child.
      pop_key: ``(node, key) -> child``: removes one child and returns it.
      create_empty: ``aux -> node``: a new node with no children, ``__init__`` not called.
      clear: ``node -> None``: removes every child.
      init: ``(node, [(key, child), ...]) -> None``: gives an empty node its children.

    ``node_dict(node)`` is ``{key: child}``, marks unwrapped. An Object's ``flatten``
    lists its attributes only (Flax's also lists ``_pytree__`` bookkeeping).

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> from flaxgraph import graph
    >>> m = nnx.Dict(w=nnx.Param(jnp.ones(2)), n=3)
    >>> impl = graph.get_node_impl(m)
    >>> isinstance(impl, graph.GraphNodeImpl), sorted(impl.node_dict(m))
    (True, ['n', 'w'])
    """

    set_key: Callable[[Any, Key, Any], None]
    pop_key: Callable[[Any, Key], Any]
    create_empty: Callable[[Any], Any]
    clear: Callable[[Any], None]
    init: Callable[[Any, Iterable[tuple[Key, Any]]], None]


NodeImpl = Union[GraphNodeImpl, PytreeNodeImpl]
"""A graph node's or a pytree node's implementation."""


def _as_elem(child: object) -> object:
    """An engine mark (``DataLeaf``/``StaticLeaf``) as Flax's (``DataElem``/``StaticElem``)."""
    if type(child) is DataLeaf:
        return DataElem(child.value)
    if type(child) is StaticLeaf:
        return StaticElem(child.value)
    return child


def _as_mark(child: object) -> object:
    """Flax's mark (``DataElem``/``StaticElem``) as the engine's."""
    if type(child) is DataElem:
        return DataLeaf(child.value)
    if type(child) is StaticElem:
        return StaticLeaf(child.value)
    return child


def _unmarked(child: object) -> object:
    return child.value if isinstance(child, DataElem | StaticElem) else child


class _FromFlax:
    """The engine's ``NodeTypeImpl`` functions of a type registered with Flax's functions."""

    __slots__ = ("impl",)

    def __init__(self, impl: GraphNodeImpl):
        self.impl = impl

    def flatten(self, node: object) -> tuple[list[tuple[Key, object]], Hashable]:
        children, aux = self.impl.flatten(node)
        return [(key, _as_mark(child)) for key, child in children], aux

    def create_empty(self, aux: Hashable, trace: object = None) -> object:
        del trace  # (Flax's create_empty takes the aux alone)
        return self.impl.create_empty(aux)

    def set_items(self, node: object, items: list[tuple[Key, object]], aux: Hashable) -> None:
        del aux
        self.impl.clear(node)
        self.impl.init(node, items)

    def get_child(self, node: object, key: Key) -> object:
        return self.impl.node_dict(node).get(key, MISSING)

    def del_child(self, node: object, key: Key) -> None:
        self.impl.pop_key(node, key)


def flax_view(engine: NodeTypeImpl) -> GraphNodeImpl:
    """Flax's ``GraphNodeImpl`` of an engine node type: the one registered, or one of its own."""
    source = getattr(engine.flatten, "__self__", None)
    if type(source) is _FromFlax:
        return source.impl

    def flatten(node: object) -> tuple[list[tuple[Key, object]], Hashable]:
        children, aux = engine.flatten(node)
        return [(key, _as_elem(child)) for key, child in children], aux

    def pop_key(node: object, key: Key) -> object:
        child = engine.get_child(node, key)
        if child is MISSING:
            raise AttributeError(f"{type(node).__name__} has no child {key!r} to pop")
        engine.del_child(node, key)
        return child

    def clear(node: object) -> None:
        engine.set_items(node, [], engine.flatten(node)[1])

    def init(node: object, children: Iterable[tuple[Key, object]]) -> None:
        items = [(key, _unmarked(child)) for key, child in children]
        engine.set_items(node, items, engine.flatten(node)[1])

    return GraphNodeImpl(
        type=engine.type,
        flatten=flatten,
        set_key=engine.set_child,
        pop_key=pop_key,
        create_empty=lambda aux: engine.create_empty(aux, None),
        clear=clear,
        init=init,
    )


class GraphRegistry(Mapping[type, GraphNodeImpl]):
    """Flax's ``GRAPH_REGISTRY``: a read-only ``GraphNodeImpl`` view of the engine's node types."""

    def __init__(self, engine: Mapping[type, NodeTypeImpl]) -> None:
        self._engine = engine
        self._views: dict[type, tuple[NodeTypeImpl, GraphNodeImpl]] = {}

    def __getitem__(self, node_type: type) -> GraphNodeImpl:
        engine = self._engine[node_type]
        known = self._views.get(node_type)
        if known is None or known[0] is not engine:
            known = (engine, flax_view(engine))
            self._views[node_type] = known
        return known[1]

    def __contains__(self, node_type: object) -> bool:
        return node_type in self._engine

    def __iter__(self) -> Iterator[type]:
        return iter(self._engine)

    def __len__(self) -> int:
        return len(self._engine)


GRAPH_REGISTRY = GraphRegistry(REGISTRY.node_impls())
"""The graph node types and their Flax-shaped ``GraphNodeImpl`` (a view of the engine's)."""


def register_graph_node_type(
    type: type,
    flatten: Callable[[Any], tuple[Sequence[tuple[Key, Any]], Any]],
    set_key: Callable[[Any, Key, Any], None],
    pop_key: Callable[[Any, Key], Any],
    create_empty: Callable[[Any], Any],
    clear: Callable[[Any], None],
    init: Callable[[Any, Iterable[tuple[Key, Any]]], None],
) -> None:
    """Makes ``type`` a reference-semantics graph node, with Flax's functions.

    ``split``, ``merge``, ``update`` and the transforms walk it; a shared instance stays
    shared. Also at ``nnx.register_graph_node_type``.

    Args:
      type: the node class.
      flatten: ``node -> ([(key, child), ...], aux)``; ``aux`` must be hashable; a child
        wrapped in ``DataElem``/``StaticElem`` is data/static whatever its value.
      set_key, pop_key, create_empty, clear, init: as :class:`GraphNodeImpl`'s fields.

    Raises:
      ValueError: ``type`` is already a graph node type.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> class Bag:
    ...   def __init__(self, **kw): self.__dict__.update(kw)
    >>> nnx.register_graph_node_type(
    ...   Bag, flatten=lambda b: (sorted(vars(b).items()), None),
    ...   set_key=setattr, pop_key=lambda b, k: vars(b).pop(k),
    ...   create_empty=lambda _: Bag(), clear=lambda b: vars(b).clear(),
    ...   init=lambda b, items: vars(b).update(items))
    >>> bag = Bag(w=nnx.Param(jnp.ones(2)), n=3)
    >>> graphdef, state = nnx.split(bag)
    >>> sorted(state), nnx.merge(graphdef, state).n
    (['w'], 3)
    """
    if type in GRAPH_REGISTRY:
        raise ValueError(f"Node type {type} is already registered.")
    engine = _FromFlax(GraphNodeImpl(type, flatten, set_key, pop_key, create_empty, clear, init))
    register_node_type(
        type,
        engine.flatten,
        engine.create_empty,
        engine.set_items,
        engine.get_child,
        set_key,
        engine.del_child,
    )


def _by_position(seq: Sequence[object]) -> tuple[list[tuple[Key, object]], None]:
    return list(enumerate(seq)), None


def _by_sorted_key(mapping: Mapping[Key, object]) -> tuple[list[tuple[Key, object]], None]:
    return sorted(mapping.items()), None


def _set_item(container: MutableMapping[Key, object], key: Key, value: object) -> None:
    container[key] = value


def _pop_item(container: MutableMapping[Key, object], key: Key) -> object:
    return container.pop(key)


def _builtin_pytree_impls() -> dict[type, PytreeNodeImpl]:
    """Flax's built-in container impls: list, tuple, dict, State, NoneType."""
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
"""The container types with their own ``PytreeNodeImpl`` (Flax's five and those registered)."""


def register_pytree_node_type(
    type: type,
    flatten: Callable[[Any], tuple[Sequence[tuple[Key, Any]], Any]],
    unflatten: Callable[[Sequence[tuple[Key, Any]], Any], Any],
    *,
    set_key: Callable[[Any, Key, Any], None] | None = None,
    pop_key: Callable[[Any, Key], Any] | None = None,
) -> None:
    """Makes ``type`` a container walked by value: a JAX pytree node keyed by ``flatten``'s keys.

    Args:
      type: the container class.
      flatten: ``node -> ([(key, child), ...], aux)``; ``aux`` must be hashable.
      unflatten: ``([(key, child), ...], aux) -> node``.
      set_key, pop_key: Flax's optional in-place setters, kept in :data:`PYTREE_REGISTRY`.

    Raises:
      ValueError: ``type`` is already registered.

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
    """Whether JAX's registry makes ``x`` a pytree node (asked without flattening)."""
    return isinstance(x, tuple) or not jax.tree_util.all_leaves((x,))


def is_pytree_node(x: object, *, check_graph_registry: bool = True) -> bool:
    """Whether ``x`` is a JAX pytree node other than a Variable or (by default) a graph node.

    Args:
      x: any value.
      check_graph_registry: if false, a graph node whose class is also a JAX pytree
        (``pytree=True``) counts as one.

    Returns:
      ``True`` for ``None``, lists, tuples, dicts, ``State`` and registered pytree classes.

    >>> import flaxgraph as nnx
    >>> is_pytree_node(None), is_pytree_node([1]), is_pytree_node(nnx.Param(1))
    (True, True, False)
    >>> m = nnx.Dict(a=1)
    >>> is_pytree_node(m), is_pytree_node(m, check_graph_registry=False)
    (False, True)
    """
    if check_graph_registry and type(x) in GRAPH_REGISTRY:
        return False
    return not _is_variable(x) and _is_jax_pytree_node(x)


def is_node(x: object) -> bool:
    """Whether ``x`` has children Flax's graph functions visit: a graph node or a pytree node.

    ``False`` for a Variable and for leaves; ``None`` is a node (an empty pytree to Flax).

    >>> import flaxgraph as nnx
    >>> [is_node(v) for v in (nnx.Dict(), [1], None, nnx.Param(1), 3)]
    [True, True, True, False, False]
    """
    if _is_variable(x):
        return False
    return type(x) in GRAPH_REGISTRY or is_pytree_node(x)


def is_graph_node(x: object) -> bool:
    """Whether ``x`` is a graph node, a Variable or a raw ``jax.Ref`` (a usual ``is_leaf=``).

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> [is_graph_node(v) for v in (nnx.Dict(), nnx.Param(1), [1], jnp.ones(1))]
    [True, True, False, False]
    """
    return type(x) in GRAPH_REGISTRY or REGISTRY.kind_of(x) in (VARIABLE, REF)


def is_node_type(x: type) -> bool:
    """Whether ``x`` is a graph node type, a :data:`PYTREE_REGISTRY` type or ``GenericPytree``."""
    return x in GRAPH_REGISTRY or x in PYTREE_REGISTRY or x is GenericPytree


def is_node_leaf(x: object) -> bool:
    """Whether ``x`` is a State leaf: a Variable, array, Ref, ``ArrayRefOutput`` or ``NoUpdate``."""
    if isinstance(x, (ArrayRefOutput, NoUpdate, jax.Array, np.ndarray)):
        return True
    return REGISTRY.kind_of(x) in (VARIABLE, REF)


def get_node_impl(x: object) -> GraphNodeImpl | PytreeNodeImpl | None:
    """The implementation Flax's graph functions walk ``x`` with.

    Returns:
      The ``GraphNodeImpl`` of a graph node; the :data:`PYTREE_REGISTRY` entry of
      ``type(x)``; :data:`PYTREE_NODE_IMPL` for another pytree node; ``None`` for a
      Variable or a leaf.

    >>> import flaxgraph as nnx
    >>> get_node_impl([1]).type, get_node_impl(None).type, get_node_impl(3)
    (<class 'list'>, <class 'NoneType'>, None)
    >>> get_node_impl([1, 2]).flatten([1, 2])
    ([(0, 1), (1, 2)], None)
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
    """The impl registered for the type ``x`` (``PYTREE_NODE_IMPL`` for ``GenericPytree``)."""
    if x is GenericPytree:
        return PYTREE_NODE_IMPL
    return PYTREE_REGISTRY.get(x) or GRAPH_REGISTRY.get(x)
