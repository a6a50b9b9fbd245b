"""Nested mappings (any ``Mapping``: dicts, ``State``, ``FrozenDict``) <-> flat mappings
keyed by paths. Source: Flax NNX 0.12 ``nnx.traversals``."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

IsLeafCallable = Callable[[tuple[Any, ...], Mapping[Any, Any]], bool]


class _EmptyNode:
    """Marks an empty mapping kept by ``flatten_mapping(..., keep_empty_nodes=True)``."""

    def __repr__(self) -> str:
        return "empty_node"


empty_node = _EmptyNode()


def flatten_mapping(
    xs: Mapping[Any, Any],
    /,
    *,
    keep_empty_nodes: bool = False,
    is_leaf: IsLeafCallable | None = None,
    sep: str | None = None,
) -> dict[Any, Any]:
    """Flattens a nested mapping into one dict keyed by paths.

    Args:
      xs: a nested ``Mapping``; its non-mapping values are the leaves.
      keep_empty_nodes: keep an empty sub-mapping as the leaf ``empty_node``
        (``unflatten_mapping`` turns it back into ``{}``); by default it is dropped.
      is_leaf: ``is_leaf(path, mapping) -> bool``: keep that sub-mapping whole as a leaf.
      sep: join each path's keys (as ``str``) with ``sep``; ``None``: tuple keys.

    Raises:
      TypeError: ``xs`` is not a ``Mapping``.

    Example::

      >>> from flaxgraph import traversals
      >>> traversals.flatten_mapping({'a': 1, 'b': {'c': 2}})
      {('a',): 1, ('b', 'c'): 2}
      >>> traversals.flatten_mapping({'a': 1, 'b': {'c': 2}}, sep='/')
      {'a': 1, 'b/c': 2}
    """
    if not isinstance(xs, Mapping):
        raise TypeError(f"flatten_mapping expects a Mapping, got {type(xs).__name__}.")
    out: dict[Any, Any] = {}

    def walk(node: Mapping[Any, Any], prefix: tuple[Any, ...]) -> None:
        for key, value in node.items():
            path = (*prefix, key)
            if isinstance(value, Mapping) and not (is_leaf and is_leaf(path, value)):
                if value:
                    walk(value, path)
                elif keep_empty_nodes:
                    out[path] = empty_node
                continue
            out[path] = value

    walk(xs, ())
    if sep is None:
        return out
    return {sep.join(str(k) for k in path): value for path, value in out.items()}


def flatten_to_sequence(
    xs: Mapping[Any, Any], /, *, is_leaf: IsLeafCallable | None = None
) -> list[tuple[Any, Any]]:
    """The ``(tuple_path, leaf)`` pairs of a nested mapping, in insertion order (empty
    sub-mappings dropped; ``is_leaf`` as in ``flatten_mapping``).

    Example::

      >>> from flaxgraph import traversals
      >>> traversals.flatten_to_sequence({'a': {'b': 1}})
      [(('a', 'b'), 1)]
    """
    return list(flatten_mapping(xs, is_leaf=is_leaf).items())


def unflatten_mapping(
    xs: Mapping[Any, Any] | Iterable[tuple[Any, Any]], /, *, sep: str | None = None
) -> dict[Any, Any]:
    """Rebuilds a nested dict from ``{path: leaf}`` (or pairs), the inverse of ``flatten_mapping``.

    ``sep``: the separator string paths were joined with (``None``: tuple paths); an
    ``empty_node`` leaf becomes ``{}``.

    Raises:
      ValueError: one path is a prefix of another, naming the path.

    Example::

      >>> from flaxgraph import traversals
      >>> traversals.unflatten_mapping({('a',): 1, ('b', 'c'): 2})
      {'a': 1, 'b': {'c': 2}}
    """
    items = xs.items() if isinstance(xs, Mapping) else xs
    result: dict[Hashable, Any] = {}
    for path, value in items:
        keys = tuple(path.split(sep)) if sep is not None else tuple(path)
        cursor = result
        for i, key in enumerate(keys[:-1]):
            nxt = cursor.setdefault(key, {})
            if not isinstance(nxt, dict):
                raise ValueError(
                    f"unflatten_mapping: path {keys[: i + 1]!r} is both a leaf and a prefix of "
                    f"{keys!r}; give each path one meaning."
                )
            cursor = nxt
        cursor[keys[-1]] = {} if value is empty_node else value
    return result
