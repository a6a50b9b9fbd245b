"""Copying a graph's objects while sharing its Variables.

Several functions of Flax NNX 0.12 return "a new node" that differs from the
original in a few objects and shares everything else's *state*:
``nnx.with_rngs`` (new random streams), ``nnx.view``/``nnx.with_attributes``
(other static attributes), ``split_rngs``/``fork_rngs`` with
``graph_updates=False``. They all need the same thing: a copy of every graph node
(``Object``, ``Module``, registered node types) and of the lists, tuples and dicts
holding them, in which every ``Variable`` is the *same* Variable as in the
original. Changing a Variable's value through the copy changes the original;
changing an attribute of a copied object does not.

``copy_nodes`` makes that copy and lets a callback replace or edit each copied
node (children first). Sharing and cycles are kept in graph mode; in tree mode
(``graph=False``) a Variable reachable along two paths is an error that lists
every path.

  >>> import jax.numpy as jnp, flaxgraph as nnx
  >>> from flaxgraph.node_copy import copy_nodes
  >>> class Box(nnx.Module):
  ...   def __init__(self): self.w = nnx.Param(jnp.zeros(2)); self.name = 'a'
  >>> box = Box()
  >>> new = copy_nodes(box)
  >>> new is box, new.w is box.w
  (False, True)

Source: the "new node sharing the arrays" behaviour of Flax NNX 0.12
``nnx.view``/``nnx.with_rngs``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from flaxgraph.graphlib.refmap import RefMap
from flaxgraph.graphlib.registry import (
    DATA_LEAF,
    DICT,
    NODE,
    PYTREE,
    REGISTRY,
    SEQUENCE,
    STATIC_LEAF,
    VARIABLE,
    is_node_or_variable,
    node_impl,
)
from flaxgraph.graphlib.walk import flatten_with_paths
from flaxgraph.modes import resolve_graph
from flaxgraph.tracing import current_trace
from flaxgraph.typing import PathParts


def check_tree(node: Any, graph: bool, root_name: str = "node") -> None:
    """In tree mode (``graph=False``), raises if a Variable is reachable twice.

    Raises:
      SharedReferenceError (a ``ValueError``): ``graph`` is false and a Variable of
        ``node`` is reachable along several paths; the message lists them.
    """
    if not graph:
        flatten_with_paths(node, root_name=root_name, graph=False)


def copy_nodes(
    node: Any,
    f: Callable[[PathParts, Any], Any] | None = None,
    *,
    graph: bool | None = None,
    root_name: str = "node",
) -> Any:
    """A copy of ``node``'s graph nodes and containers that shares its Variables.

    Args:
      node: any value: a graph node, a Variable, a list/tuple/dict or pytree of them.
      f: called as ``f(path, copy)`` on every copied graph node, children first
        (the root last, with path ``()``); it may edit the copy in place and
        returns the node to use in its place (usually the copy itself).
      graph: ``False`` for tree mode (``None``: the current default,
        ``nnx.set_graph_mode``).
      root_name: how error messages name ``node``.

    Returns:
      The copy. Variables, arrays and static values are the original ones; each
      graph node reachable along several paths is copied once (graph mode).

    Raises:
      SharedReferenceError (a ``ValueError``): tree mode and a Variable reachable
        along several paths.
    """
    check_tree(node, resolve_graph(graph), root_name)
    done = RefMap[Any]()
    trace = current_trace()

    def go(x: Any, path: PathParts) -> Any:
        kind = REGISTRY.kind_of(x)
        if kind is VARIABLE:
            return x
        if kind is NODE:
            if x in done:
                return done[x]
            impl = node_impl(x)
            items, metadata = impl.flatten(x)
            new = impl.create_empty(metadata, trace)
            done[x] = new  # a cycle back to x links to the copy
            children = []
            for key, child in list(items):
                child_kind = REGISTRY.kind_of(child)
                if child_kind is DATA_LEAF or child_kind is STATIC_LEAF:
                    child = child.value
                children.append((key, go(child, (*path, key))))
            impl.set_items(new, children, metadata)
            result = new if f is None else f(path, new)
            done[x] = result
            return result
        if kind is DICT:
            return {k: go(v, (*path, k)) for k, v in x.items()}
        if kind is SEQUENCE:
            return type(x)(go(v, (*path, i)) for i, v in enumerate(x))
        if kind is PYTREE and _holds_nodes(x):
            return jax.tree.map(lambda y: go(y, path), x, is_leaf=is_node_or_variable)
        return x

    return go(node, ())


def _holds_nodes(x: Any) -> bool:
    leaves = jax.tree.leaves(x, is_leaf=is_node_or_variable)
    return not (len(leaves) == 1 and leaves[0] is x) and any(
        REGISTRY.kind_of(leaf) is NODE for leaf in leaves
    )
