"""Walking and rewriting graphs: ``iter_graph``, ``iter_children``, ``iter_module_children``,
``find_duplicates``, ``recursive_map``.

Source: Flax NNX 0.12 functions of those names.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Any

from flaxgraph.filterlib import Filter, to_predicate
from flaxgraph.graphlib.refmap import RefMap
from flaxgraph.graphlib.registry import (
    DICT,
    NODE,
    REGISTRY,
    SEQUENCE,
    VARIABLE,
    children_of,
    node_impl,
)
from flaxgraph.graphlib.walk import flatten_with_paths, not_a_pytree_error
from flaxgraph.modes import resolve_graph
from flaxgraph.typing import PathParts


def _check_tree(node: object, graph: bool | None, what: str) -> bool:
    """Resolves ``graph``; in tree mode, raises if a Variable is reachable twice."""
    if resolve_graph(graph):
        return True
    flatten_with_paths(node, graph=False, root_name=what)
    return False


def iter_graph(node: object, /, *, graph: bool | None = None) -> Iterator[tuple[PathParts, Any]]:
    """Yields ``(path, value)`` for every value in the graph, children first, root last (``()``).

    Graph mode yields a shared node or Variable once, at its first path; tree mode
    (``graph=False``) yields a shared node without Variables at every path.

    Raises:
      SharedReferenceError (a ``ValueError``): tree mode and a Variable is shared (raised
        when iteration starts).

    >>> import flaxgraph as nnx
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> [p for p, v in nnx.iter_graph(m) if isinstance(v, nnx.Variable)]
    [('bias',), ('kernel',)]
    """
    yield from _iter(node, (), RefMap[bool](), _check_tree(node, graph, "node"))


def iter_children(node: object, /, *, graph: bool | None = None) -> Iterator[tuple[Hashable, Any]]:
    """Yields ``(key, child)`` for the direct children of ``node`` that are nodes or Variables.

    The same in both modes; two keys holding one object both yield.

    Raises:
      ValueError: tree mode and ``node``'s class has ``pytree=False``.

    >>> import flaxgraph as nnx
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> [k for k, _ in nnx.iter_children(m)]
    ['bias', 'kernel']
    """
    if not resolve_graph(graph) and getattr(type(node), "_obj_is_pytree", True) is False:
        raise not_a_pytree_error(type(node), "node")
    for key, child in children_of(node):
        if REGISTRY.kind_of(child) <= VARIABLE:  # a graph node or a Variable
            yield key, child


def iter_module_children(
    node: object, /, *, graph: bool | None = None
) -> Iterator[tuple[Hashable, Any]]:
    """Yields ``(key, child)`` for the direct children of ``node`` that are graph nodes.

    >>> import flaxgraph as nnx
    >>> class Pair(nnx.Module):
    ...   def __init__(self):
    ...     self.a = nnx.Linear(1, 1, rngs=nnx.Rngs(0)); self.b = self.a
    >>> [k for k, _ in nnx.iter_module_children(Pair())]
    ['a', 'b']
    """
    for key, child in children_of(node):
        if REGISTRY.kind_of(child) is NODE:
            yield key, child


def _iter(
    x: object, path: PathParts, seen: RefMap[bool], graph: bool
) -> Iterator[tuple[PathParts, Any]]:
    node = REGISTRY.kind_of(x) <= VARIABLE  # a graph node or a Variable: identity matters
    if node:
        if x in seen:
            return  # graph mode: seen before; tree mode: a cycle (on the current path)
        seen[x] = True
    for key, child in children_of(x):
        yield from _iter(child, (*path, key), seen, graph)
    if node and not graph:
        del seen[x]  # tree mode: only the current path is remembered
    yield path, x


def find_duplicates(node: object, /, *, only: Filter = ...) -> list[list[PathParts]]:
    """Every path (shortest first) of each node or Variable reachable along several paths.

    Args:
      node: a graph.
      only: report only the shared values this filter matches (on the value and its
        first path); default: all.

    Returns:
      One list of paths per shared value, in walk order (``[]``: no sharing); what sits
      below a shared node is not reported again.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> class Tied(nnx.Module):
    ...   def __init__(self):
    ...     self.a = nnx.Param(jnp.ones(1)); self.b = self.a
    >>> nnx.find_duplicates(Tied()), nnx.find_duplicates(Tied(), only=nnx.BatchStat)
    ([[('a',), ('b',)]], [])
    """
    paths = RefMap[list[PathParts]]()

    def walk(x: object, path: PathParts) -> None:
        if REGISTRY.kind_of(x) <= VARIABLE:  # a graph node or a Variable
            if x in paths:
                paths[x].append(path)
                return
            paths[x] = [path]
        for key, child in children_of(x):
            walk(child, (*path, key))

    walk(node, ())
    keep = to_predicate(only)
    return [
        sorted(p, key=len)
        for x, p in paths.items()
        if len(p) > 1 and (only is ... or keep(p[0], x))
    ]


def recursive_map(
    f: Callable[[PathParts, Any], Any], node: object, /, *, graph: bool | None = None
) -> Any:
    """Replaces each graph node and Variable, children first, by ``f(path, value)``.

    A shared node is mapped once (sharing survives); containers are rebuilt around mapped
    children; arrays and statics pass through.

    Args:
      f: gets the path and the (already rebuilt) value; ``f((), node)`` is returned.
      node: a graph; its nodes are changed in place (children replaced).
      graph: in tree mode a Variable reachable along two paths raises
        ``SharedReferenceError`` before anything changes.

    Example (replace every Linear by a wrapper)::

      new_model = nnx.recursive_map(
          lambda path, x: Wrapped(x) if isinstance(x, nnx.Linear) else x, model)
    """
    _check_tree(node, graph, "node")
    done = RefMap[Any]()

    def go(x: Any, path: PathParts) -> object:
        kind = REGISTRY.kind_of(x)
        if kind is NODE:
            impl = node_impl(x)
            if x in done:
                return done[x]
            done[x] = x  # a cycle back to x sees x itself
            for key, child in list(impl.flatten(x)[0]):
                new_child = go(child, (*path, key))
                if new_child is not child:
                    impl.set_child(x, key, new_child)
            result = f(path, x)
            done[x] = result
            return result
        if kind is VARIABLE:
            if x not in done:
                done[x] = f(path, x)
            return done[x]
        if kind is SEQUENCE or kind is DICT:
            items = children_of(x)
            new = [(k, go(v, (*path, k))) for k, v in items]
            if all(n is v for (_, v), (_, n) in zip(items, new)):
                return x
            if type(x) is dict:
                return dict(new)
            return type(x)(v for _, v in new)
        return x

    return go(node, ())
