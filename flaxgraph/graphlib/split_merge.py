"""Split and merge: an object graph to ``(graphdef, state)`` and back.

How the walks work: ``docs/design.md``, "split, merge, update".
Source: Flax NNX 0.12 graph API (``nnx.split``, ``merge``, ``state``, ``variables``,
``graphdef``, ``clone``).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

from flaxgraph.errors import GraphStructureError, UnmatchedLeafError, numbered_fixes
from flaxgraph.filterlib import Filter, partition_predicates
from flaxgraph.graphlib.build import build_graph
from flaxgraph.graphlib.direct_merge import GAVE_UP, join_states, merge_direct
from flaxgraph.graphlib.direct_split import partition_state, split_direct
from flaxgraph.graphlib.graph_state import GraphState
from flaxgraph.graphlib.graphdefs import GraphDef
from flaxgraph.graphlib.paths import keys_str, path_str
from flaxgraph.graphlib.registry import ARRAY, REGISTRY, VARIABLE
from flaxgraph.graphlib.walk import flatten_with_paths
from flaxgraph.modes import resolve_graph
from flaxgraph.statelib import FlatState, State, partition, unmatched_message
from flaxgraph.typing import PathParts


def states_from_leaves(
    node: object, leaves: list[tuple[PathParts, Any]], filters: tuple[Filter, ...], strict: bool
) -> list[State]:
    if not filters:
        return [_as_state(leaves)]
    parts, rest = partition(leaves, partition_predicates(filters))
    if strict and rest:
        path, leaf = rest[0]
        raise UnmatchedLeafError(unmatched_message(path_str("node", node, path), leaf))
    return [_as_state(p) for p in parts]


def _as_state(pairs: Sequence[tuple[PathParts, Any]]) -> Any:
    # A root that is itself a leaf (a Variable or an array) is its own state, as in NNX.
    if len(pairs) == 1 and pairs[0][0] == ():
        return pairs[0][1]
    return State.from_flat_path(pairs)


def split(node: object, *filters: Filter, graph: bool | None = None) -> Any:
    """Splits a graph into its structure and its state.

    Args:
      node: an Object/Module, Variable, or list/dict/tuple holding them.
      *filters: one State per filter; each leaf goes to the first filter it matches.
      graph: ``True`` walks a graph (shared references and cycles kept), ``False`` a
        tree; ``None`` takes the default (``nnx.set_graph_mode``).

    Returns:
      ``(graphdef, state)`` without filters, else ``(graphdef, state_1, …, state_n)``.
      The States hold the graph's own Variables; a shared Variable appears once, at its
      first path.

    Raises:
      UnmatchedLeafError (a ``ValueError``): a leaf matches no filter (end them with
        ``...``); the message names its path.
      SharedReferenceError (a ``ValueError``): tree mode and a Variable is reachable
        along several paths; the message lists every path.

    An unhashable static is fine: only ``hash(graphdef)`` raises ``StaticAttributeError``.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> class M(nnx.Module):
    ...   def __init__(self):
    ...     self.w = nnx.Param(jnp.ones(3)); self.n = nnx.BatchStat(jnp.zeros(3))
    >>> m = M()
    >>> graphdef, params, rest = nnx.split(m, nnx.Param, ...)
    >>> list(params), list(rest), params['w'] is m.w
    (['w'], ['n'], True)
    """
    graphdef, states = _split_states(node, resolve_graph(graph), filters, strict=True)
    return (graphdef, *states)


def state(node: object, *filters: Filter, graph: bool | None = None) -> Any:
    """The State of ``node``: all of it, or one State per filter.

    Args:
      node, graph: as ``split``.
      *filters: optional filters (first match wins).

    Returns:
      With zero or one filter a single State, else a tuple of States holding the graph's
      own Variables. Leaves matching no filter are left out (no error).

    Raises:
      SharedReferenceError (a ``ValueError``): tree mode and a Variable is shared.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> nnx.state(m, nnx.Param)['bias'] is m.bias
    True
    """
    states = _split_states(node, resolve_graph(graph), filters, strict=False)[1]
    return states[0] if len(states) == 1 else tuple(states)


def variables(node: object, *filters: Filter, graph: bool | None = None) -> Any:
    """``state(node, *filters, graph=graph)`` under Flax 0.12's name; raises as ``state``.

    >>> import flaxgraph as nnx
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> sorted(nnx.variables(m, nnx.Param))
    ['bias', 'kernel']
    """
    return state(node, *filters, graph=graph)


def graphdef(node: object, /, *, graph: bool | None = None) -> GraphDef[Any]:
    """The GraphDef of ``node`` (its structure, no state); ``node`` and ``graph`` as ``split``.

    Raises:
      SharedReferenceError (a ``ValueError``): tree mode and a Variable is shared.

    >>> import flaxgraph as nnx
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> nnx.graphdef(m) == nnx.split(m)[0]
    True
    """
    graph = resolve_graph(graph)
    found = split_direct(node, graph)
    return found[0] if found is not None else flatten_with_paths(node, graph=graph)[0]


def _split_states(
    node: object, graph: bool, filters: tuple[Filter, ...], strict: bool
) -> tuple[GraphDef[Any], list[Any]]:
    """The GraphDef and one State per filter, by the direct walk where it applies."""
    found = split_direct(node, graph)
    if found is None:
        graphdef, leaves = flatten_with_paths(node, graph=graph)
        return graphdef, states_from_leaves(node, leaves, filters, strict)
    graphdef, state = found
    return graphdef, (_filtered_states(node, state, filters, strict) if filters else [state])


def _filtered_states(
    node: object, state: object, filters: tuple[Filter, ...], strict: bool
) -> list[State]:
    """One State per filter from the State ``split_direct`` made (first match wins)."""
    if type(state) is not State:  # the root itself is the leaf
        return states_from_leaves(node, [((), state)], filters, strict)
    parts, rest = partition_state(state, partition_predicates(filters))
    if strict and rest:
        path, leaf = rest[0]
        raise UnmatchedLeafError(unmatched_message(path_str("node", node, path), leaf))
    return parts


_first = operator.itemgetter(0)


def _leaf_list(graphdef: GraphDef[Any], states: tuple[Any, ...]) -> list[Any]:
    """The leaves given as one list (``jax.tree.leaves(state)``), in the GraphDef's order."""
    if len(states) != 1:
        raise TypeError(
            f"merge got a list of leaves and {len(states) - 1} more state(s): a list stands "
            "for the whole state (every leaf, in the order of jax.tree.leaves(state)).\n"
            "Fix: pass the list alone, nnx.merge(graphdef, leaves), or pass States."
        )
    leaves = states[0]
    if len(leaves) != graphdef.num_leaves:
        raise GraphStructureError(
            f"Incorrect number of leaves: the GraphDef needs {graphdef.num_leaves} "
            f"({', '.join(keys_str(p) for p in graphdef.leaf_paths[:5])}"
            f"{'…' if graphdef.num_leaves > 5 else ''}) and the list given to merge has "
            f"{len(leaves)}.\nFix: pass jax.tree.leaves(state) of the State split returned."
        )
    return list(leaves)


def ordered_leaves(graphdef: GraphDef[Any], states: tuple[Any, ...]) -> list[Any]:
    if states and type(states[0]) is list:
        return _leaf_list(graphdef, states)
    if len(states) == 1 and isinstance(states[0], State):
        pairs: Any = states[0].flat_state()
        if tuple(map(_first, pairs)) == graphdef.leaf_paths:
            return [leaf for _, leaf in pairs]  # already in the GraphDef's order
    flat: dict[PathParts, Any] = {}
    for s in states:
        if isinstance(s, State):
            pairs = s.flat_state()
        elif isinstance(s, Mapping):
            pairs = State(s).flat_state()
        elif isinstance(s, FlatState):
            pairs = list(s)
        elif graphdef.leaf_paths == ((),):
            pairs = [((), s)]  # the root is a leaf and `s` is its state (see _as_state)
        else:
            raise TypeError(
                f"merge expects States after the GraphDef, got a {type(s).__name__}: the "
                "GraphDef's root is not a leaf, so its state is a State (or a nested dict, a "
                "FlatState, or the list jax.tree.leaves(state)).\nFix: pass what split "
                "returned: nnx.merge(graphdef, state)."
            )
        for path, leaf in pairs:
            if path in flat:
                raise GraphStructureError(
                    f"The path {keys_str(path)} appears in more than one of the States "
                    "given to merge; each leaf must come from exactly one State."
                )
            flat[path] = leaf
    try:
        ordered = [flat[p] for p in graphdef.leaf_paths]
    except KeyError:
        missing = [keys_str(p) for p in graphdef.leaf_paths if p not in flat]
        count = (
            f"Incorrect number of leaves (the GraphDef needs {graphdef.num_leaves}, the "
            f"States have {len(flat)}): "
            if len(flat) != graphdef.num_leaves
            else ""
        )
        raise GraphStructureError(
            f"{count}The States given to merge do not match the GraphDef: missing leaves at "
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
    if len(flat) > len(ordered):
        known = set(graphdef.leaf_paths)
        extra = [keys_str(p) for p in flat if p not in known]
        raise GraphStructureError(
            "The States given to merge have leaves the GraphDef has no place for: "
            + ", ".join(extra[:10])
            + (f" (and {len(extra) - 10} more)" if len(extra) > 10 else "")
            + ".\nFix: use the GraphDef returned by the same split as the State."
        )
    return ordered


def graphdef_and_states(
    first: object, states: tuple[Any, ...]
) -> tuple[GraphDef[Any], tuple[Any, ...]]:
    if isinstance(first, GraphState):
        for i, s in enumerate(states, start=1):
            if not isinstance(s, GraphState):
                raise ValueError(
                    f"Expected GraphState object at position {i} of merge's arguments, got a "
                    f"{type(s).__name__}: once the first argument is a GraphState (from "
                    "nnx.unpack), all of them must be.\nFix: pass the GraphStates of one "
                    "unpack, or nnx.merge(graphdef, *states) with plain States."
                )
            if s._graphdef != first._graphdef:
                raise ValueError(
                    f"The GraphDef must be the same in every GraphState given to merge, but "
                    f"the GraphState at position {i} has a GraphDef of a "
                    f"{s._graphdef.type.__name__} and the first one of a "
                    f"{first._graphdef.type.__name__}.\nFix: pass the GraphStates of a single "
                    "nnx.unpack call."
                )
        return first._graphdef, tuple(s._state for s in (first, *states))
    if not isinstance(first, GraphDef):
        raise TypeError(
            f"merge expects a GraphDef (or a GraphState) first, got a {type(first).__name__}."
            "\nFix: pass what split returned: nnx.merge(graphdef, state)."
        )
    return first, tuple(s._state if isinstance(s, GraphState) else s for s in states)


def merge(
    graphdef: GraphDef[Any] | GraphState,
    /,
    *states: object,
    copy: bool = False,
    recreate_variables: bool = True,
) -> Any:
    """Builds new objects from a GraphDef and its State(s); the inverse of ``split``.

    Args:
      graphdef: from ``split`` (or a ``GraphState`` from ``unpack``).
      *states: the States of the same ``split``, matched by path (nested dicts,
        ``FlatState``s and GraphStates too); or one list, ``jax.tree.leaves(state)``; or,
        when the root is a leaf, that leaf.
      copy: ``False``: the result holds the States' own Variables; ``True``: new
        Variables with the same values and metadata.
      recreate_variables: a raw value at a Variable's place (a pure State) becomes a
        Variable of the recorded kind and metadata (``True``) or is put there as is.

    Returns:
      New objects (``__init__`` not called), shared references and cycles restored.

    Raises:
      GraphStructureError (a ``ValueError``): a leaf is missing, has no place, or a list
        of leaves has the wrong length; the message names the paths.
      TypeError: the first argument is no GraphDef/GraphState, a state is not a mapping
        (and the root is not a leaf), or a list comes with other states.

    >>> import jax, jax.numpy as jnp, flaxgraph as nnx
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> m.shared = m.kernel
    >>> graphdef, state = nnx.split(m)
    >>> m2 = nnx.merge(graphdef, state)
    >>> m2 is m, m2.kernel is m.kernel, m2.shared is m2.kernel
    (False, True, True)
    >>> nnx.merge(graphdef, state, copy=True).kernel is m.kernel
    False
    >>> m3 = nnx.merge(graphdef, jax.tree.leaves(state))  # a list of leaves: new Params
    >>> type(m3.kernel).__name__, bool((m3.kernel[...] == m.kernel[...]).all())
    ('Param', True)
    """
    graphdef, all_states = graphdef_and_states(graphdef, states)
    if not all_states and graphdef.leaf_paths:
        raise TypeError(
            "merge() missing 1 required positional argument: 'state': the GraphDef has "
            f"{graphdef.num_leaves} leaves ({keys_str(graphdef.leaf_paths[0])}…) and no State "
            "was given.\nFix: pass the States split returned: nnx.merge(graphdef, state)."
        )
    joined = join_states(all_states) if all_states else None
    if joined is not None:
        built = merge_direct(graphdef, joined, copy, recreate_variables)
        if built is not GAVE_UP:
            return built
    return build_graph(
        graphdef,
        ordered_leaves(graphdef, all_states),
        copy_variables=copy,
        recreate_variables=recreate_variables,
    )


def _copy_array(x: Any) -> object:
    return x.copy() if REGISTRY.kind_of(x) is ARRAY else x


def clone(
    node: object, variables: bool = True, *, arrays: bool = False, graph: bool | None = None
) -> Any:
    """A copy of ``node``'s graph: new objects, same structure, shared references kept.

    Args:
      node, graph: as ``split``.
      variables: ``True``: new Variables (same values and metadata); ``False``: the
        copy holds ``node``'s Variables.
      arrays: also copy the arrays (no buffer shared); needs ``variables=True``.

    Raises:
      ValueError: ``arrays=True`` with ``variables=False``.
      SharedReferenceError (a ``ValueError``): tree mode and a Variable is shared.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> nnx.clone(m).kernel is m.kernel, nnx.clone(m, variables=False).kernel is m.kernel
    (False, True)
    """
    if arrays and not variables:
        raise ValueError(
            "clone(node, variables=False, arrays=True): copying the arrays needs new "
            "Variables to hold them.\nFix: pass variables=True (the default)."
        )
    graph = resolve_graph(graph)
    found = split_direct(node, graph) if not arrays else None
    if found is not None and type(found[1]) is State:
        built = merge_direct(found[0], found[1], variables, True)
        if built is not GAVE_UP:
            return built
    graphdef, leaves = flatten_with_paths(node, graph=graph)
    if not variables:
        return build_graph(graphdef, [v for _, v in leaves], copy_variables=False)
    if arrays:
        kind_of = REGISTRY.kind_of
        copied = [
            v.replace(_copy_array(v.raw_value)) if kind_of(v) is VARIABLE else _copy_array(v)
            for _, v in leaves
        ]
        return build_graph(graphdef, copied, copy_variables=False)
    return build_graph(graphdef, [v for _, v in leaves])
