"""``flatten``/``unflatten``, ``unpack``, ``map`` and ``as_pure``: thin layers over split/merge.

Source: Flax NNX 0.12 ``nnx.flatten``, ``unflatten``, ``unpack``, ``map``, ``as_pure``
(``pure``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax

from flaxgraph.filterlib import Filter
from flaxgraph.graphlib.build import build_graph as _build
from flaxgraph.graphlib.graph_state import GraphState
from flaxgraph.graphlib.graphdefs import GraphDef, renumber
from flaxgraph.graphlib.refmap import RefMap
from flaxgraph.graphlib.split_merge import merge, ordered_leaves, split
from flaxgraph.graphlib.walk import flatten_with_paths as _walk
from flaxgraph.modes import resolve_graph
from flaxgraph.statelib import FlatState, State, map_state
from flaxgraph.typing import PathParts
from flaxgraph.variablelib.variable import is_variable


def flatten(
    node: object,
    /,
    *,
    with_paths: bool = True,
    ref_index: RefMap[int] | None = None,
    ref_outer_index: RefMap[int] | None = None,
    graph: bool | None = None,
) -> tuple[GraphDef[Any], FlatState | list[Any]]:
    """Splits ``node`` into its GraphDef and its leaves in flat form.

    Args:
      node: a graph (Object/Module, Variable, containers of them).
      with_paths: ``True``: a ``FlatState`` of ``(path, leaf)`` pairs; ``False``: a list.
      ref_index: node -> reference index, shared between calls; fresh if ``None``.
      ref_outer_index: object -> its index in an outer split: those objects keep their
        outer indices (new ones go past them), so ``unflatten(...,
        outer_index_outer_ref=...)`` updates them in place (the README's "Update contexts").
      graph: graph or tree mode (``None``: ``nnx.set_graph_mode``'s default).

    Returns:
      ``(graphdef, leaves)`` in the order ``unflatten`` consumes them (walk order; tree
      mode: sorted by path); a leaf is the graph's own Variable or a raw array.

    Raises:
      SharedReferenceError (a ``ValueError``): tree mode and a Variable is shared.
      StaticAttributeError (a ``TypeError``): an unhashable static attribute.

    >>> import flaxgraph as nnx
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> graphdef, flat = nnx.flatten(m)
    >>> flat.paths
    (('bias',), ('kernel',))
    >>> nnx.unflatten(graphdef, flat).kernel is m.kernel
    True
    """
    ref_index = RefMap() if ref_index is None else ref_index
    graphdef, leaves = _walk(node, ref_index=ref_index, graph=resolve_graph(graph))
    if ref_outer_index is not None:
        offset = 1 + max(ref_outer_index.values(), default=-1)
        graphdef = renumber(graphdef, ref_index, ref_outer_index, offset)
    if graphdef.tree:  # tree mode: leaves sorted by path, as Flax's TreeNodeDef orders them
        leaves = [leaves[i] for _, i in graphdef.nodes[0].path_index]
    if with_paths:
        return graphdef, FlatState(leaves)
    return graphdef, [leaf for _, leaf in leaves]


def unflatten(
    graphdef: GraphDef[Any],
    state: State | FlatState | Sequence[Any],
    /,
    *,
    index_ref: dict[int, Any] | None = None,
    outer_index_outer_ref: dict[int, Any] | None = None,
    copy_variables: bool = False,
    recreate_variables: bool = True,
) -> Any:
    """Builds the graph of ``graphdef`` from its leaves; the inverse of ``flatten``.

    Args:
      graphdef: the structure.
      state: a ``State`` (matched by path), a ``FlatState`` or a list of leaves in the
        GraphDef's order.
      index_ref: reference index -> object, shared between calls (``merge_context``).
      outer_index_outer_ref: reference index -> existing object, updated in place
        (values, attributes, structure) instead of built anew; nothing is written if
        the leaves do not fit.
      copy_variables: ``True``: new Variables with the same value and metadata.
      recreate_variables: a raw value at a Variable's place becomes a Variable of the
        recorded kind (``True``) or stays raw.

    Returns:
      The root of the graph.

    Raises:
      GraphStructureError (a ``ValueError``): the leaves do not fit the GraphDef, or an
        object to update has another type than the GraphDef says.
      TraceContextError (a ``ValueError``): an object to update belongs to another trace.

    Updating the caller's objects in place, as a transform does:

    >>> import flaxgraph as nnx
    >>> from flaxgraph.graphlib.refmap import RefMap
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> graphdef, flat = nnx.flatten(m, ref_index=(outer := RefMap()))
    >>> index_ref = {}                                     # outer index -> inner object
    >>> inner = nnx.unflatten(graphdef, flat, index_ref=index_ref, copy_variables=True)
    >>> inner.tag = 'changed'                              # a structural change
    >>> g2, flat2 = nnx.flatten(inner, ref_outer_index=RefMap.from_indexmap(index_ref))
    >>> nnx.unflatten(g2, flat2, outer_index_outer_ref={i: x for x, i in outer.items()}) is m
    True
    >>> m.tag
    'changed'
    """
    if isinstance(state, (State, Mapping)):
        leaves: Sequence[Any] = ordered_leaves(graphdef, (state,))
    elif isinstance(state, FlatState):
        leaves = state.leaves
        if graphdef.tree and state.paths != graphdef.leaf_paths:
            leaves = ordered_leaves(graphdef, (state,))  # matched by path
    else:
        leaves = list(state)
        if graphdef.tree and len(leaves) == graphdef.num_leaves:
            walk_order: list[Any] = [None] * len(leaves)  # from path order back to walk order
            for k, (_, i) in enumerate(graphdef.nodes[0].path_index):
                walk_order[i] = leaves[k]
            leaves = walk_order
    return _build(
        graphdef,
        leaves,
        index_ref=index_ref,
        reuse=outer_index_outer_ref,
        copy_variables=copy_variables,
        recreate_variables=recreate_variables,
    )


def unpack(node: object, *filters: Filter, graph: bool | None = None) -> object:
    """``split`` returning ``GraphState``s (State and GraphDef), so ``merge(*them)`` suffices.

    Args:
      node, *filters, graph: as ``split``.

    Returns:
      One ``GraphState`` for zero or one filter, else a tuple of them.

    Raises:
      UnmatchedLeafError, SharedReferenceError: as ``split``.

    >>> import flaxgraph as nnx
    >>> m = nnx.BatchNorm(2, rngs=nnx.Rngs(0))
    >>> params, stats = nnx.unpack(m, nnx.Param, nnx.BatchStat)
    >>> type(nnx.merge(params, stats)).__name__
    'BatchNorm'
    """
    graphdef, *states = split(node, *filters, graph=graph)
    packed = [GraphState(graphdef, s) for s in states]
    return packed[0] if len(packed) == 1 else tuple(packed)


def map(
    f: Callable[[PathParts, Any], Any],
    node: object,
    /,
    *,
    graph: bool | None = None,
    recreate_variables: bool = True,
) -> Any:
    """A new graph like ``node`` with every state leaf replaced by ``f(path, leaf)``.

    Args:
      f: ``(path, leaf) -> new leaf``; ``leaf`` is the graph's own Variable or an array.
      node, graph: as ``split``.
      recreate_variables: a raw value returned for a Variable is wrapped in a Variable
        of the same kind and metadata (``True``) or kept raw.

    Returns:
      A new graph; a Variable ``f`` returns unchanged is shared with ``node``.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> zeros = nnx.map(lambda path, v: v.replace(jnp.zeros_like(v.value)), m)
    >>> float(abs(zeros.kernel.value).sum()), zeros is m
    (0.0, False)
    """
    graphdef, state = split(node, graph=graph)
    new_state = map_state(f, state) if isinstance(state, State) else f((), state)  # root leaf
    return merge(graphdef, new_state, recreate_variables=recreate_variables)


def as_pure(tree: object) -> object:
    """``tree`` (any pytree) with every Variable replaced by its raw value; States stay States.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> nnx.as_pure({'w': nnx.Param(jnp.ones(2)), 'n': 3})
    {'n': 3, 'w': Array([1., 1.], dtype=float32)}
    """
    return jax.tree.map(lambda x: x.raw_value if is_variable(x) else x, tree, is_leaf=is_variable)


pure = as_pure

__all__ = ["flatten", "unflatten", "unpack", "map", "as_pure", "pure"]
