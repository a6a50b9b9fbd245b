"""``with_rngs``: a copy of a graph whose random streams are split, broadcast or forked.

See the package README. Source: Flax NNX 0.12 ``nnx.with_rngs``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from flaxgraph.filterlib import to_predicate
from flaxgraph.graphlib.descendants import iter_graph
from flaxgraph.graphlib.paths import path_str
from flaxgraph.modes import resolve
from flaxgraph.node_copy import copy_nodes
from flaxgraph.rnglib.rngs import RngStream, rule_list
from flaxgraph.rnglib.splitting import rng_decorator
from flaxgraph.typing import MISSING

_CATCH_ALL = (Ellipsis, True)


def _fork_rules(fork: Any) -> list[tuple[Any, Any, Any]]:
    if fork is None:
        return []
    if isinstance(fork, str) or not isinstance(fork, Sequence):
        fork = [fork]
    return [(f, to_predicate(f), None) for f in fork]


def _is_catch_all(f: Any) -> bool:
    return any(f is c for c in _CATCH_ALL)


def with_rngs(
    node: Any = MISSING,
    /,
    *,
    split: Any = None,
    fork: Any = None,
    broadcast: Any = None,
    only: Any = True,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """Returns a copy of ``node`` whose ``RngStream``s are split, broadcast or forked.

    Each selected stream draws one key from the original (see the package README).

    Args:
      node: any value holding ``RngStream``s. Omit it for the decorator form
        (``@nnx.with_rngs(split=4)`` passes such copies of the arguments).
      split: a shape (every stream) or ``{filter: shape}`` (first match wins): ``k``
        independent keys.
      fork: a filter or sequence of filters of streams to fork; ``...`` forks every
        stream no other rule selects.
      broadcast: like ``split``, one fresh key repeated.
      only: a filter restricting the streams considered (default: all).
      graph: ``False`` for tree mode (``None``: the default).
      graph_updates: accepted for Flax compatibility; the result is always a copy (Flax
        0.12.8 raises ``NotImplementedError`` in its default mode).

    Filters see ``(path, stream)``. A stream selected by several rules takes ``split`` over
    ``broadcast`` over ``fork``, unless two matching filters are specific (neither ``...``
    nor ``True``): an error. Unselected streams are shared.

    Returns:
      A copy of ``node`` (Variables shared except the new streams'), or a decorator.

    Raises:
      ValueError: a stream matches specific filters of two rules (path and filters named).
      TypeError: a ``split``/``broadcast`` shape is not an int or tuple of ints.
      SharedReferenceError (``ValueError``): tree mode and a Variable reachable twice.

    >>> import flaxgraph as nnx
    >>> rngs = nnx.Rngs(params=0, dropout=1, noise=2)
    >>> new = nnx.with_rngs(rngs, split={'params': 4, ...: (2, 4)})
    >>> new.params.key.shape, new.noise.key.shape, rngs.params.key.shape
    ((4,), (2, 4), ())
    >>> nnx.with_rngs(rngs, broadcast=3, only='dropout').dropout.key.shape
    (3,)
    """
    mode = resolve(graph, graph_updates)
    split_rules = rule_list(split, "split")
    broadcast_rules = rule_list(broadcast, "broadcast")
    fork_rules = _fork_rules(fork)
    only_p = to_predicate(only)
    if node is MISSING:
        rules = (split_rules, broadcast_rules, fork_rules, only_p, mode.graph)
        return rng_decorator(lambda args: _with_rngs(args, *rules, arguments=True), False)
    return _with_rngs(node, split_rules, broadcast_rules, fork_rules, only_p, mode.graph)


def _with_rngs(
    node: Any,
    split_rules: list[tuple[Any, Any, Any]],
    broadcast_rules: list[tuple[Any, Any, Any]],
    fork_rules: list[tuple[Any, Any, Any]],
    only_p: Callable[..., bool],
    graph: bool,
    arguments: bool = False,
) -> Any:
    """``with_rngs`` on ``node``; with ``arguments``, messages name paths from ``args``/``kwargs``."""
    root_name = "(args, kwargs)" if arguments else "node"

    def where(path: tuple[Hashable, ...]) -> str:
        if arguments and path:
            name = ("args", "kwargs")[path[0]]  # type: ignore[call-overload]
            return path_str(name, node[path[0]], path[1:])
        return path_str(root_name, node, path)

    # Decide every stream's rule before anything is drawn: a conflict leaves the
    # caller's streams untouched. Copies share the key Variable: find them by it.
    decisions: dict[int, tuple[Any, str, Any]] = {}
    rule_sets = (("split", split_rules), ("broadcast", broadcast_rules), ("fork", fork_rules))
    for path, value in iter_graph(node):
        if not (isinstance(value, RngStream) and only_p(path, value)):
            continue
        matches = []
        for what, rules in rule_sets:
            for filt, predicate, shape in rules:
                if predicate(path, value):
                    matches.append((what, filt, shape))
                    break
        specific = [m for m in matches if not _is_catch_all(m[1])]
        if len(specific) > 1:
            rules_text = "\n".join(f"  - {w} (filter {f!r})" for w, f, _ in matches)
            raise ValueError(
                f"The RngStream at {where(path)} matches multiple "
                f"rules of with_rngs:\n{rules_text}\nA stream can be split, broadcast or "
                "forked, not several of them.\nFix: make the filters disjoint, e.g. "
                "fork=nnx.Not('params') next to split={'params': 4}."
            )
        if matches:
            what, _, shape = matches[0]
            decisions[id(value.key)] = (value.key, what, shape)

    def replace(path: tuple[Hashable, ...], copy: Any) -> Any:
        entry = decisions.get(id(copy.key)) if isinstance(copy, RngStream) else None
        if entry is None or entry[0] is not copy.key:
            return copy
        _, what, shape = entry
        if what == "split":
            return copy.split(shape)
        if what == "broadcast":
            return copy.broadcast(shape)
        return RngStream(copy(), tag=copy.tag)

    return copy_nodes(node, replace, graph=graph, root_name=root_name)
