"""The graph engine's public functions: split, merge, update and friends.

``split(node)`` returns ``(graphdef, state)``: the frozen structure and the
leaves. ``merge(graphdef, state)`` builds new objects from them, restoring
shared references and cycles. ``update(node, state)`` writes a State's values
into existing objects in place, so references held elsewhere stay valid::

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

Source: Flax NNX graph API (``nnx.split``, ``nnx.merge``, ``nnx.update``, …, 0.12).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any

from flaxgraph.errors import GraphStructureError, UnmatchedLeafError, numbered_fixes
from flaxgraph.filters import Filter, filters_to_predicates
from flaxgraph.graph.flatten import flatten
from flaxgraph.graph.graphdef import GraphDef
from flaxgraph.graph.paths import keys_str, path_str
from flaxgraph.graph.refmap import RefMap
from flaxgraph.graph.registry import (
    _GRAPH_NODE_IMPLS,
    BUILTIN_CONTAINERS,
    MISSING,
    DataLeaf,
    is_array_leaf,
    pytree_children,
)
from flaxgraph.graph.unflatten import unflatten
from flaxgraph.state import State, partition, unmatched_message
from flaxgraph.tracing import current_trace
from flaxgraph.variables import Variable, _set_metadata, _set_value

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


# -- update -----------------------------------------------------------------------------


def _get_child(node: Any, key: Hashable) -> Any:
    impl = _GRAPH_NODE_IMPLS.get(type(node))
    if impl is not None:
        return impl.get_child(node, key)
    if type(node) is dict:
        return node.get(key, MISSING)
    if type(node) in (list, tuple):
        return node[key] if isinstance(key, int) and -len(node) <= key < len(node) else MISSING
    children = pytree_children(node) if not isinstance(node, Variable) else None
    if children is not None:
        return dict(children[0]).get(key, MISSING)
    return MISSING


def _check_node_trace(node: Any, what: str) -> None:
    # Checked while planning, so a node from another trace fails before any write.
    check = getattr(node, "_check_trace", None)
    if check is not None:
        check(what)


def _setter(node: Any, key: Hashable, where: Callable[[], str]) -> Callable[[Any], None]:
    impl = _GRAPH_NODE_IMPLS.get(type(node))
    if impl is not None:
        _check_node_trace(node, "update")
        return lambda value: impl.set_child(node, key, value)
    if type(node) in (dict, list):
        return lambda value: node.__setitem__(key, value)
    raise GraphStructureError(
        f"Cannot write the raw leaf at {where()}: it sits in an immutable "
        f"{type(node).__name__}.\nFix: hold the array in a Variable (nnx.Variable(x)), or "
        "use a list or dict instead."
    )


def update(node: Any, state: Any, /, *states: Any) -> None:
    """Writes the values of State(s) into ``node`` in place.

    For every leaf of the States, the Variable at the same path in ``node`` gets the
    leaf's value (and metadata, if the leaf is a Variable); a raw array attribute is
    replaced; a path ``node`` does not have yet is added as a new attribute. Leaves
    of ``node`` absent from the States are left as they are.

    Args:
      node: the graph to update.
      state, *states: States (or nested mappings) whose paths are relative to ``node``.

    Raises:
      GraphStructureError (a ``ValueError``): the States' tree does not fit ``node``:
        a sub-state where ``node`` has a leaf, a leaf where it has a sub-graph, or a
        path through a missing node. Nothing is written in that case: either every
        leaf is updated or none is.
      TraceContextError (a ``ValueError``): ``node`` was created outside the current
        JAX transform.

    Source: Flax NNX ``nnx.update``.
    """
    trace = current_trace()
    var_writes: list[tuple[Variable[Any], Any, Any]] = []
    other_writes: list[Callable[[], None]] = []
    for s in (state, *states):
        if not isinstance(s, State):
            s = State(s) if isinstance(s, Mapping) else s
        if isinstance(s, Variable):
            if not isinstance(node, Variable):
                raise GraphStructureError(
                    f"update got a {type(s).__name__} for a {type(node).__name__}; pass a State."
                )
            _plan_variable(node, s, var_writes, trace)
            continue
        if not isinstance(s, State):
            raise TypeError(
                f"update expects States (or nested dicts) after the node, got a {type(s).__name__}."
            )
        _plan_update(node, s, (), node, var_writes, other_writes, trace)
    # Everything was checked: now write (either every leaf is updated or none is).
    for target, value, metadata in var_writes:
        _set_value(target, value)
        _set_metadata(target, metadata)
    for write in other_writes:
        write()


def _plan_variable(
    target: Variable[Any],
    leaf: Any,
    var_writes: list[tuple[Variable[Any], Any, Any]],
    trace: object,
) -> None:
    if target._var_trace is not trace:
        target._check_update()
    value = leaf.raw_value if isinstance(leaf, Variable) else leaf
    target._check_fits(value)  # a Ref-backed target keeps its shape and dtype
    var_writes.append(
        (target, value, leaf._var_metadata if isinstance(leaf, Variable) else target._var_metadata)
    )


def _plan_update(
    node: Any,
    state: State,
    prefix: PathParts,
    root: Any,
    var_writes: list[tuple[Variable[Any], Any, Any]],
    other_writes: list[Callable[[], None]],
    trace: object,
) -> None:
    impl = _GRAPH_NODE_IMPLS.get(type(node))
    for key, leaf in state._mapping.items():
        current = impl.get_child(node, key) if impl is not None else _get_child(node, key)
        if isinstance(current, Variable) and not isinstance(leaf, State):
            _plan_variable(current, leaf, var_writes, trace)
            continue
        path = (*prefix, key)
        if isinstance(leaf, State):
            if current is MISSING or isinstance(current, Variable) or is_array_leaf(current):
                raise GraphStructureError(
                    f"The State has a sub-state at {keys_str(path)}, but the node has "
                    + ("nothing" if current is MISSING else f"a {type(current).__name__} leaf")
                    + f" at {path_str('node', root, path)}.\nFix: update with a State split "
                    "from a graph of the same structure, or use merge to build new sub-graphs."
                )
            _plan_update(current, leaf, path, root, var_writes, other_writes, trace)
        elif (
            current is MISSING
            or is_array_leaf(current)
            or current is None
            or _is_data_child(node, key)
        ):
            new_value = leaf.copy() if isinstance(leaf, Variable) else leaf
            set_fn = _setter(node, key, lambda path=path: path_str("node", root, path))
            other_writes.append(lambda set_fn=set_fn, new_value=new_value: set_fn(new_value))
        else:
            raise GraphStructureError(
                f"The State has a leaf "
                f"({'array' if is_array_leaf(leaf) else type(leaf).__name__}) at "
                f"{keys_str(path)}, but the node has a {type(current).__name__} there "
                f"({path_str('node', root, path)}).\nFix: update with a State split from a "
                "graph of the same structure."
            )


def _is_data_child(node: Any, key: Hashable) -> bool:
    """Whether ``node`` puts its child ``key`` in the State although it is no array
    (an attribute marked ``nnx.data(3)``). Only reached on the rare path."""
    impl = _GRAPH_NODE_IMPLS.get(type(node))
    return impl is not None and any(
        k == key and type(v) is DataLeaf for k, v in impl.flatten(node)[0]
    )


# -- pop ------------------------------------------------------------------------------------


def pop(node: Any, *filters: Filter) -> Any:
    """Removes the leaves matching ``filters`` from ``node`` and returns them as State(s).

    Returns:
      One State per filter (a single State for one filter).

    Raises:
      ValueError: no filter given.
      GraphStructureError: a matched leaf sits in a list or tuple (removing it would
        renumber its siblings); nothing is removed in that case.

    Source: Flax NNX ``nnx.pop``.
    """
    if not filters:
        raise ValueError("pop needs at least one filter, e.g. nnx.pop(model, nnx.Intermediate)")
    _, leaves = flatten(node)
    parts, _ = partition(leaves, filters_to_predicates(filters))
    removals: list[Callable[[], None]] = []
    for part in parts:
        for path, _leaf in part:
            parent = node
            for key in path[:-1]:
                parent = _get_child(parent, key)
            removals.append(_remover(parent, path, node))
    for remove in removals:
        remove()
    states = [State.from_flat_path((p, _copy_leaf(v)) for p, v in part) for part in parts]
    return states[0] if len(states) == 1 else tuple(states)


def _remover(parent: Any, path: PathParts, root: Any) -> Callable[[], None]:
    key = path[-1]
    impl = _GRAPH_NODE_IMPLS.get(type(parent))
    if impl is not None:
        _check_node_trace(parent, "pop a leaf")
        return lambda: impl.del_child(parent, key)
    if type(parent) is dict:
        return lambda: parent.pop(key, None)
    raise GraphStructureError(
        f"Cannot pop the leaf at {path_str('node', root, path)}: it sits in a "
        f"{type(parent).__name__}, and removing it would renumber its siblings."
    )


# -- iteration --------------------------------------------------------------------------------


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


# -- contexts ---------------------------------------------------------------------------------


class SplitContext:
    """Splits several graphs with one reference index (see ``split_context``)."""

    def __init__(self) -> None:
        self.ref_index: RefMap[int] = RefMap()

    def split(self, node: Any, *filters: Filter) -> Any:
        """Like ``nnx.split``, sharing this context's reference index with earlier calls."""
        graphdef, leaves = flatten(node, ref_index=self.ref_index)
        return (graphdef, *_states_from_leaves(node, leaves, filters, strict=True))


class MergeContext:
    """Merges several GraphDefs with one reference index (see ``merge_context``)."""

    def __init__(self) -> None:
        self.index_ref: dict[int, Any] = {}

    def merge(self, graphdef: GraphDef, state: Any = None, /, *states: Any) -> Any:
        """Like ``nnx.merge``, resolving references to nodes merged earlier in this context."""
        all_states = () if state is None else (state, *states)
        return unflatten(graphdef, _ordered_leaves(graphdef, all_states), index_ref=self.index_ref)


@contextlib.contextmanager
def split_context() -> Iterator[SplitContext]:
    """Context in which ``ctx.split`` calls share one reference index: a node seen in
    an earlier split becomes a reference in later GraphDefs.

    Example::

      with nnx.split_context() as ctx:
        g1, s1 = ctx.split(m1)
        g2, s2 = ctx.split(m2)      # nodes shared with m1 are references
      with nnx.merge_context() as ctx:
        m1, m2 = ctx.merge(g1, s1), ctx.merge(g2, s2)   # sharing restored

    Source: Flax NNX ``nnx.split_context``/``nnx.merge_context``.
    """
    yield SplitContext()


@contextlib.contextmanager
def merge_context() -> Iterator[MergeContext]:
    """Context in which ``ctx.merge`` calls share one reference index (see
    ``split_context``)."""
    yield MergeContext()


# -- call --------------------------------------------------------------------------------------


class _CallProxy:
    __slots__ = ("_graphdef", "_states", "_path")

    def __init__(self, graphdef: GraphDef, states: tuple[Any, ...], path: tuple[str, ...]):
        self._graphdef = graphdef
        self._states = states
        self._path = path

    def __getattr__(self, name: str) -> _CallProxy:
        return _CallProxy(self._graphdef, self._states, (*self._path, name))

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[Any, tuple[GraphDef, State]]:
        node = merge(self._graphdef, *self._states)
        method: Any = node
        for name in self._path:
            method = getattr(method, name)
        out = method(*args, **kwargs)
        return out, split(node)


def call(graphdef_state: tuple[Any, ...], /) -> Any:
    """Functional method calls: ``out, (graphdef, state) = nnx.call((graphdef, state)).method(x)``.

    The proxy merges the graph, calls the method (``__call__`` when called directly),
    splits the graph again and returns the output with the new ``(graphdef, state)``,
    so state updates made by the method are returned, not lost.

    Source: Flax NNX ``nnx.call``.
    """
    graphdef, *states = graphdef_state
    return _CallProxy(graphdef, tuple(states), ())


__all__ = [
    "split",
    "merge",
    "update",
    "state",
    "graphdef",
    "clone",
    "pop",
    "iter_graph",
    "recursive_map",
    "find_duplicates",
    "call",
    "split_context",
    "merge_context",
]
