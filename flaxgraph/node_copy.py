"""Copying a graph's objects while sharing its Variables: the "new node" of ``nnx.with_rngs``,
``nnx.view``/``nnx.with_attributes`` and ``split_rngs``/``fork_rngs`` with
``graph_updates=False`` (a value changed through the copy changes the original; an
attribute does not)::

  >>> import jax.numpy as jnp, flaxgraph as nnx
  >>> from flaxgraph.node_copy import copy_nodes
  >>> class Box(nnx.Module):
  ...   def __init__(self): self.w = nnx.Param(jnp.zeros(2)); self.name = 'a'
  >>> box = Box()
  >>> new = copy_nodes(box)
  >>> new is box, new.w is box.w
  (False, True)

Source: the "new node sharing the arrays" of Flax NNX 0.12 ``nnx.view``/``nnx.with_rngs``."""

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
    """In tree mode (``graph=False``), raises ``SharedReferenceError`` (listing the paths) if a
    Variable of ``node`` is reachable twice."""
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
      node: a graph node, a Variable, or a container or pytree of them.
      f: called as ``f(path, copy)`` on every copied node, children first (the root last,
        path ``()``); returns the node to use in its place (usually the copy).
      graph: ``False`` for tree mode (``None``: ``nnx.set_graph_mode``'s default).
      root_name: how error messages name ``node``.

    Returns:
      The copy; a node reachable along several paths is copied once (graph mode).

    Raises:
      SharedReferenceError (a ``ValueError``): tree mode and a shared Variable.
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
