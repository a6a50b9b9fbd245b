"""Walking and rewriting graphs: ``iter_graph``, ``find_duplicates``, ``recursive_map``.

Source: Flax NNX ``nnx.iter_graph``, ``nnx.find_duplicates``, ``nnx.recursive_map`` (0.12).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Any

from flaxgraph.graph.refmap import RefMap
from flaxgraph.graph.registry import (
    _GRAPH_NODE_IMPLS,
    BUILTIN_CONTAINERS,
    is_array_leaf,
    pytree_children,
)
from flaxgraph.variables import Variable

PathParts = tuple[Hashable, ...]


def iter_graph(node: Any) -> Iterator[tuple[PathParts, Any]]:
    """Yields ``(path, value)`` for every value in the graph, children before parents.

    Every graph node, Variable, container, array and static value is yielded;
    a node or Variable reachable along several paths is yielded once, at its first
    path. The root comes last with path ``()``.

    Source: Flax NNX ``nnx.iter_graph``.
    """
    seen = RefMap[bool]()
    yield from _iter(node, (), seen)


def _children(x: Any) -> list[tuple[Hashable, Any]]:
    impl = _GRAPH_NODE_IMPLS.get(type(x))
    if impl is not None:
        return list(impl.flatten(x)[0])
    if type(x) is dict:
        return list(x.items())
    if type(x) in (list, tuple):
        return list(enumerate(x))
    if isinstance(x, Variable) or is_array_leaf(x):
        return []
    children = pytree_children(x)
    return children[0] if children is not None else []


def _iter(x: Any, path: PathParts, seen: RefMap[bool]) -> Iterator[tuple[PathParts, Any]]:
    if type(x) in _GRAPH_NODE_IMPLS or isinstance(x, Variable):
        if x in seen:
            return
        seen[x] = True
    for key, child in _children(x):
        yield from _iter(child, (*path, key), seen)
    yield path, x


def find_duplicates(node: Any) -> list[list[PathParts]]:
    """Returns, for every node or Variable reachable along more than one path, all
    its paths (shortest first). An empty list means the graph has no sharing.

    Source: Flax NNX ``nnx.find_duplicates``.
    """
    paths = RefMap[list[PathParts]]()

    def walk(x: Any, path: PathParts) -> None:
        if type(x) in _GRAPH_NODE_IMPLS or isinstance(x, Variable):
            if x in paths:
                paths[x].append(path)
                return
            paths[x] = [path]
        for key, child in _children(x):
            walk(child, (*path, key))

    walk(node, ())
    return [sorted(p, key=len) for p in paths.values() if len(p) > 1]


def recursive_map(f: Callable[[PathParts, Any], Any], node: Any) -> Any:
    """Applies ``f(path, value)`` to every graph node and Variable, children first,
    replacing each by what ``f`` returns; returns ``f((), node)``.

    A node reachable along several paths is mapped once and the result reused, so
    sharing survives. Containers are rebuilt around mapped children; arrays and
    static values are passed through untouched.

    Example (replace every Linear by a wrapper)::

      new_model = nnx.recursive_map(
          lambda path, x: Wrapped(x) if isinstance(x, nnx.Linear) else x, model)

    Source: Flax NNX ``nnx.recursive_map``.
    """
    done = RefMap[Any]()

    def go(x: Any, path: PathParts) -> Any:
        impl = _GRAPH_NODE_IMPLS.get(type(x))
        if impl is not None:
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
        if isinstance(x, Variable):
            if x not in done:
                done[x] = f(path, x)
            return done[x]
        if type(x) in BUILTIN_CONTAINERS:
            items = list(x.items()) if type(x) is dict else list(enumerate(x))
            new = [(k, go(v, (*path, k))) for k, v in items]
            if all(n is v for (_, v), (_, n) in zip(items, new)):
                return x
            if type(x) is dict:
                return dict(new)
            return type(x)(v for _, v in new)
        return x

    return go(node, ())
