"""Split and merge: an object graph to ``(graphdef, state)`` and back.

``split(node)`` returns ``(graphdef, state)``: the frozen structure and the
leaves. ``merge(graphdef, state)`` builds new objects from them, restoring
shared references and cycles::

  >>> import jax, jax.numpy as jnp, flaxgraph as nnx
  >>> class Pair(nnx.Module):
  ...   def __init__(self):
  ...     self.a = nnx.Param(jnp.zeros(2))
  ...     self.b = self.a                      # a shared reference
  >>> graphdef, state = nnx.split(Pair())
  >>> jax.tree.map(jnp.shape, state.to_pure_dict())   # stored once
  {'a': (2,)}
  >>> m = nnx.merge(graphdef, state)
  >>> m.a is m.b
  True

Source: Flax NNX graph API (``nnx.split``, ``nnx.merge``, ``nnx.state``, ``nnx.graphdef``,
``nnx.clone``, 0.12).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from typing import Any

from flaxgraph.errors import GraphStructureError, UnmatchedLeafError, numbered_fixes
from flaxgraph.filters import Filter, filters_to_predicates
from flaxgraph.graph.flatten import flatten
from flaxgraph.graph.graphdef import GraphDef
from flaxgraph.graph.paths import keys_str, path_str
from flaxgraph.graph.registry import is_array_leaf
from flaxgraph.graph.unflatten import unflatten
from flaxgraph.state import State, partition, unmatched_message
from flaxgraph.tracing import current_trace
from flaxgraph.variables import Variable

PathParts = tuple[Hashable, ...]


def _copy_leaf(leaf: Any) -> Any:
    return leaf.copy() if isinstance(leaf, Variable) else leaf


def _states_from_leaves(
    node: Any, leaves: list[tuple[PathParts, Any]], filters: tuple[Filter, ...], strict: bool
) -> list[State]:
    trace = current_trace()
    copied = [
        (
            p,
            type(v)._from_parts(v.raw_value, v._var_metadata, trace)
            if isinstance(v, Variable)
            else v,
        )
        for p, v in leaves
    ]
    if not filters:
        return [_as_state(copied)]
    parts, rest = partition(copied, filters_to_predicates(filters))
    if strict and rest:
        path, leaf = rest[0]
        raise UnmatchedLeafError(unmatched_message(path_str("node", node, path), leaf))
    return [_as_state(p) for p in parts]


def _as_state(pairs: list[tuple[PathParts, Any]]) -> Any:
    # A root that is itself a leaf (a Variable or an array) is its own state, as in NNX.
    if len(pairs) == 1 and pairs[0][0] == ():
        return pairs[0][1]
    return State.from_flat_path(pairs)


def split(node: Any, *filters: Filter) -> Any:
    """Splits a graph into its structure and its state.

    Args:
      node: an Object/Module, Variable, or list/dict/tuple holding them.
      *filters: optional filters; one State is returned per filter, each leaf going
        to the first filter that matches it.

    Returns:
      ``(graphdef, state)`` without filters, else ``(graphdef, state_1, …, state_n)``.
      Each State holds copies of the Variables (same values and metadata) and the
      raw array leaves; a shared Variable appears once, at its first path.

    Raises:
      UnmatchedLeafError (a ``ValueError``): a leaf matches none of the filters
        (end them with ``...`` to collect the rest); the message names its path.
      StaticAttributeError (a ``TypeError``): a static attribute or metadata is
        unhashable; the message names its path.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> class M(nnx.Module):
      ...   def __init__(self):
      ...     self.w = nnx.Param(jnp.ones(3)); self.n = nnx.BatchStat(jnp.zeros(3))
      >>> graphdef, params, rest = nnx.split(M(), nnx.Param, ...)
      >>> list(params), list(rest)
      (['w'], ['n'])

    Source: Flax NNX ``nnx.split``.
    """
    graphdef, leaves = flatten(node)
    return (graphdef, *_states_from_leaves(node, leaves, filters, strict=True))


def state(node: Any, *filters: Filter) -> Any:
    """Returns the State of ``node``: all of it, or one State per filter.

    Leaves that match no filter are left out (unlike ``split``, no error).
    With zero or one filter a single State is returned, else a tuple.

    Source: Flax NNX ``nnx.state``.
    """
    _, leaves = flatten(node)
    states = _states_from_leaves(node, leaves, filters, strict=False)
    return states[0] if len(states) == 1 else tuple(states)


def graphdef(node: Any) -> GraphDef:
    """Returns the GraphDef of ``node`` (its structure, no state)."""
    return flatten(node)[0]


def _ordered_leaves(graphdef: GraphDef, states: tuple[Any, ...]) -> list[Any]:
    if len(states) == 1 and isinstance(states[0], State):
        pairs = states[0].flat_state()
        if len(pairs) == len(graphdef.leaf_paths) and all(
            p == q for (p, _), q in zip(pairs, graphdef.leaf_paths)
        ):
            return [leaf for _, leaf in pairs]  # already in the GraphDef's order
    flat: dict[PathParts, Any] = {}
    for s in states:
        if graphdef.leaf_paths == ((),) and (isinstance(s, Variable) or is_array_leaf(s)):
            pairs: Any = [((), s)]  # the root is a leaf and `s` is its state (see _as_state)
        elif isinstance(s, State):
            pairs = s.flat_state()
        elif isinstance(s, Mapping):
            pairs = State(s).flat_state()
        else:
            raise TypeError(f"merge expects States after the GraphDef, got a {type(s).__name__}.")
        for path, leaf in pairs:
            if path in flat:
                raise GraphStructureError(
                    f"The path {keys_str(path)} appears in more than one of the States "
                    "given to merge; each leaf must come from exactly one State."
                )
            flat[path] = leaf
    try:
        ordered = [flat.pop(p) for p in graphdef.leaf_paths]
    except KeyError:
        present = {p for p, _ in _all_flat(states)}
        missing = [keys_str(p) for p in graphdef.leaf_paths if p not in present]
        raise GraphStructureError(
            "The States given to merge do not match the GraphDef: missing leaves at "
            + ", ".join(missing[:10])
            + (f" (and {len(missing) - 10} more)" if len(missing) > 10 else "")
            + ".\n"
            + numbered_fixes(
                [
                    "pass every State that split returned (e.g. merge(graphdef, params, rest));",
                    "check that the State comes from a graph with the same structure.",
                ]
            )
        ) from None
    if flat:
        extra = [keys_str(p) for p in flat]
        raise GraphStructureError(
            "The States given to merge have leaves the GraphDef has no place for: "
            + ", ".join(extra[:10])
            + (f" (and {len(extra) - 10} more)" if len(extra) > 10 else "")
            + ".\nFix: use the GraphDef returned by the same split as the State."
        )
    return ordered


def _all_flat(states: tuple[Any, ...]) -> Iterator[tuple[PathParts, Any]]:
    for s in states:
        yield from (s if isinstance(s, State) else State(s)).flat_state()


def merge(graphdef: GraphDef, state: Any = None, /, *states: Any) -> Any:
    """Builds new objects from a GraphDef and its State(s); the inverse of ``split``.

    Args:
      graphdef: the structure, from ``split``.
      state, *states: the States from the same ``split`` (any order). Leaves are
        matched by path.

    Returns:
      New objects (``__init__`` is not called) with fresh Variables holding the
      States' values and metadata; shared references and cycles are restored.

    Raises:
      GraphStructureError (a ``ValueError``): a leaf the GraphDef needs is missing
        from the States, or a State has a leaf the GraphDef has no place for; the
        message names the paths.

    Source: Flax NNX ``nnx.merge``. Unlike NNX, the merged objects never share
    Variables with the State, so mutating one does not change the other.
    """
    all_states = () if state is None else (state, *states)
    return unflatten(graphdef, _ordered_leaves(graphdef, all_states))


def clone(node: Any) -> Any:
    """Returns a deep, independent copy of ``node`` (``merge(*split(node))``)."""
    graphdef, leaves = flatten(node)
    return unflatten(graphdef, [_copy_leaf(v) for _, v in leaves])
