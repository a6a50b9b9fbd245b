"""Lift types: ``StateAxes``, ``StateSharding`` and ``DiffState``, a prefix per sub-state.

See the package README, "Lift types".
Source: the "JAX-style NNX Transforms" FLIP flax#4107; Flax NNX's "Transformations"
guide ("Lift types"); Flax NNX 0.12 ``StateAxes``, ``DiffState``, ``nnx.prefix``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from flaxgraph.filterlib import Filter, Predicate, to_predicate
from flaxgraph.modes import Mode
from flaxgraph.typing import PathParts


class LiftType:
    """Base of lift types: an ordered mapping filter -> prefix.

    Args:
      filter_prefixes: a mapping (or iterable of pairs) from filters to prefixes, or
        a ``State`` of prefixes (each leaf gets the prefix at its own path).

    Equal lift types (type, filters, prefixes) count as the same prefix at two aliases.
    """

    __slots__ = ("filters", "prefixes", "predicates")
    distributes = False
    """If True, the mapping applies to every object of a pytree; raw leaves get ``leaf_prefix``."""
    leaf_prefix: object = None

    def __init__(self, filter_prefixes: Mapping[Filter, Any] | Iterable[tuple[Filter, Any]], /):
        if hasattr(filter_prefixes, "flat_state"):  # a State: one entry per path
            items = [(_AtPath(p), unbox_value(v)) for p, v in filter_prefixes.flat_state()]
        else:
            items = list(
                filter_prefixes.items() if isinstance(filter_prefixes, Mapping) else filter_prefixes
            )
        self.filters = tuple(f for f, _ in items)
        self.prefixes = tuple(p for _, p in items)
        self.predicates: tuple[Predicate, ...] = tuple(to_predicate(f) for f in self.filters)

    def prefix_of(self, path: PathParts, value: object) -> object:
        """The prefix of the leaf at ``path`` (relative to the object), or ``NO_MATCH``."""
        for predicate, prefix in zip(self.predicates, self.prefixes):
            if predicate(path, value):
                return prefix
        return NO_MATCH

    def map_prefix(self, path: PathParts, variable: object) -> object:
        """The prefix of the Variable at ``path``; ``ValueError`` if no filter matches it."""
        prefix = self.prefix_of(tuple(path), variable)
        if prefix is NO_MATCH:
            raise ValueError(
                f"No filter of {self!r} matches the value at {'/'.join(map(str, path))}.\n"
                "Fix: add a filter for it, or end the mapping with `...: <prefix>`."
            )
        return prefix

    def items(self) -> list[tuple[Filter, Any]]:
        """The ``(filter, prefix)`` pairs, in order."""
        return list(zip(self.filters, self.prefixes))

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and self.filters == other.filters
            and self.prefixes == other.prefixes
        )

    def __hash__(self) -> int:
        return hash((type(self), self.filters, self.prefixes))

    def __repr__(self) -> str:
        body = ", ".join(f"{_filter_repr(f)}: {p!r}" for f, p in self.items())
        return f"{type(self).__name__}({{{body}}})"


class _AtPath:
    """The filter of one State path (a lift type built from a ``State``)."""

    __slots__ = ("path",)

    def __init__(self, path: PathParts):
        self.path = tuple(path)

    def __call__(self, path: PathParts, value: object) -> bool:
        return tuple(path) == self.path

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _AtPath) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    def __repr__(self) -> str:
        return "/".join(map(str, self.path)) or "<root>"


def unbox_value(v: object) -> object:
    return getattr(v, "raw_value", v)


def _filter_repr(f: Filter) -> str:
    if isinstance(f, type):
        return f.__name__
    if isinstance(f, tuple):
        return "(" + ", ".join(_filter_repr(x) for x in f) + ")"
    return "..." if f is Ellipsis else repr(f)


class _NoMatch:
    def __repr__(self) -> str:
        return "NO_MATCH"


NO_MATCH: object = _NoMatch()


class StateAxes(LiftType):
    """Per-filter axes for one object in ``vmap``/``pmap``/``scan`` ``in_axes``/``out_axes``.

    Values are ints (the mapped axis), ``None`` (broadcast) or, in ``scan``,
    ``nnx.Carry``. It reads as a Mapping filter -> axis (compared by equality).

    Example::

      >>> import flaxgraph as nnx
      >>> sa = nnx.StateAxes({nnx.Param: 0, ...: None})
      >>> sa.axes, sa.get(nnx.Param), sa.get(nnx.BatchStat, 'absent'), len(sa)
      ((0, None), 0, 'absent', 2)
    """

    __slots__ = ()

    # -- Flax NNX 0.12: a StateAxes is a read-only Mapping filter -> axis ----------
    @property
    def axes(self) -> tuple[Any, ...]:
        """The axes (ints, ``None`` or ``nnx.Carry``), in filter order."""
        return self.prefixes

    def keys(self) -> tuple[Filter, ...]:
        """The filters, in order."""
        return self.filters

    def values(self) -> tuple[Any, ...]:
        """The axes, in filter order (same as ``axes``)."""
        return self.prefixes

    def get(self, key: Filter, default: object = None) -> Any:
        """The axis given for the filter ``key`` (by equality), or ``default``."""
        for f, axis in zip(self.filters, self.prefixes):
            if f == key:
                return axis
        return default

    def __getitem__(self, key: Filter) -> object:
        axis = self.get(key, NO_MATCH)
        if axis is NO_MATCH:
            raise KeyError(
                f"StateAxes has no filter {_filter_repr(key)}; it has {list(self.filters)}"
            )
        return axis

    def __iter__(self) -> Iterator[Filter]:
        return iter(self.filters)

    def __len__(self) -> int:
        return len(self.filters)

    def __contains__(self, key: object) -> bool:
        return any(f == key for f in self.filters)


class StateSharding(LiftType):
    """Per-filter shardings for one object in ``jit``'s ``in_shardings``/``out_shardings``.

    Values are ``jax.sharding.Sharding``, ``PartitionSpec`` (with a mesh in context)
    or ``None`` (the compiler chooses).
    """

    __slots__ = ()


class DiffState:
    """Differentiate the sub-state ``filter`` selects in argument ``argnum``.

    Used in ``argnums`` of ``grad``, ``value_and_grad``, ``vjp`` and ``custom_vjp``;
    ``filter`` selects the leaves of the argument at position ``argnum``.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> d = nnx.DiffState(0, nnx.Param)
      >>> d.map_prefix(('w',), nnx.Param(jnp.ones(2))), d.map_prefix(('s',), nnx.BatchStat(1))
      (True, False)
    """

    __slots__ = ("argnum", "filter")

    def __init__(self, argnum: int, filter: Filter):
        self.argnum = argnum
        self.filter = filter

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, DiffState)
            and self.argnum == other.argnum
            and self.filter == other.filter
        )

    def __hash__(self) -> int:
        return hash((DiffState, self.argnum, self.filter))

    def __repr__(self) -> str:
        return f"DiffState({self.argnum}, {_filter_repr(self.filter)})"

    def map_prefix(self, path: PathParts, variable: object) -> bool:
        """Whether the Variable at ``path`` (relative to the argument) is differentiated."""
        return bool(to_predicate(self.filter)(tuple(path), variable))


class StatePrefix:
    """A ``State`` or ``nnx.prefix`` result at an object: each leaf takes the value at its path."""

    __slots__ = ("state", "by_path", "rule")

    def __init__(
        self,
        state: Any,
        by_path: dict[PathParts, Any] | None = None,
        rule: Callable[[PathParts, Any], Any] | None = None,
    ):
        from flaxgraph.variablelib.variable import is_variable

        self.state = state
        if by_path is None:
            by_path = {p: (v.raw_value if is_variable(v) else v) for p, v in state.flat_state()}
        self.by_path = by_path
        self.rule = rule
        """``nnx.prefix``'s rule ``(path, leaf) -> prefix``, for a Variable seen as a reference."""

    @property
    def prefixes(self) -> tuple[Any, ...]:
        return tuple(self.by_path.values())

    def prefix_of(self, path: PathParts, value: object) -> object:
        return self.by_path.get(path, NO_MATCH)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StatePrefix) and other.state is self.state

    def __hash__(self) -> int:
        return id(self.state)

    def __repr__(self) -> str:
        return f"State prefix with {len(self.by_path)} leaves"


def is_node_states(x: object) -> bool:
    """Whether ``x`` is an ``nnx.extract.NodeStates`` (``nnx.prefix``'s graph-mode result)."""
    from flaxgraph.extract import NodeStates

    return isinstance(x, NodeStates)


def is_graph_prefix(x: object) -> bool:
    """Whether the prefix ``x`` is a graph node (a Module, Rngs, Object…)."""
    from flaxgraph.graphlib.registry import is_node_module

    return is_node_module(x)


def is_reference_prefix(x: Any) -> bool:
    """Whether ``x`` is ``nnx.prefix``'s ``NodeStates`` for a later sighting of a shared object."""
    from flaxgraph.graphlib.graphdefs import NodeRef

    return is_node_states(x) and x._graphdef is not None and type(x._graphdef.root) is NodeRef


def object_prefix(prefix: Any, graph: bool) -> StatePrefix | None:
    """The per-path prefix from ``prefix`` (``NodeStates``, or a tree-mode copy), else ``None``."""
    if is_node_states(prefix):
        by_path: dict[PathParts, Any] = {}
        for s in prefix.states:
            if hasattr(s, "flat_state"):
                by_path.update(StatePrefix(s).by_path)
            else:  # a Variable root (nnx.prefix(variable, ...)): the value is its prefix
                by_path[()] = s
        return StatePrefix(prefix, by_path, getattr(prefix.metadata, "rule", None))
    if not graph and is_graph_prefix(prefix):
        return StatePrefix(prefix, dict(_object_paths(prefix, ())))
    return None


def _object_paths(x: Any, path: PathParts, unbox: bool = True) -> Iterable[tuple[PathParts, Any]]:
    """``(path, value)`` of every non-node value in a prefix object (unboxed if ``unbox``)."""
    from flaxgraph.graphlib.registry import REGISTRY, VARIABLE, get_graph_node_impl

    impl = get_graph_node_impl(x)
    if impl is not None:
        items, _ = impl.flatten(x)
    elif type(x) in (list, tuple):
        items = list(enumerate(x))
    elif type(x) is dict:
        items = list(x.items())
    else:
        yield path, (x.raw_value if unbox and REGISTRY.kind_of(x) is VARIABLE else x)
        return
    for k, v in items:
        yield from _object_paths(v, (*path, k), unbox)


def reject_lift_types(
    mode: Mode, transform: str, argument: str, *trees: object, plain: str = "a plain prefix"
) -> None:
    """Checks prefix trees (``in_axes``, ``argnums``…) when a transform is created.

    Raises:
      ValueError: a Variable; in graph mode a graph node; a lift type without graph
        updates. The message names the entry and says what to give (``plain``).
    """
    for tree in trees:
        for path, found in _prefix_entries(tree, (argument,)):
            where = "".join(f"[{k!r}]" if i else str(k) for i, k in enumerate(path))
            _check_entry(mode, transform, argument, where, found, plain)


def _prefix_entries(t: object, path: tuple[Any, ...]) -> Iterable[tuple[tuple[Any, ...], Any]]:
    """The entries of a prefix tree that a check looks at, with their paths."""
    from flaxgraph.variablelib.variable import is_variable

    if isinstance(t, (LiftType, DiffState)) or is_variable(t) or is_graph_prefix(t):
        yield path, t
    elif isinstance(t, (tuple, list)):
        for i, x in enumerate(t):
            yield from _prefix_entries(x, (*path, i))
    elif isinstance(t, dict):
        for k, x in t.items():
            yield from _prefix_entries(x, (*path, k))


def _check_entry(
    mode: Mode, transform: str, argument: str, where: str, found: object, plain: str
) -> None:
    from flaxgraph.variablelib.variable import is_variable

    kind = type(found).__name__
    if is_variable(found):
        raise ValueError(
            f"{where} (in `{argument}` of nnx.{transform}) is a Variable of type {kind}. "
            "Variables prefixes are not supported: a prefix is not a Variable but the "
            "value that applies to one.\nFix: pass a prefix for the entire Variable "
            f"({plain}) instead of a Variable holding it."
        )
    if is_graph_prefix(found):
        if not mode.graph:  # tree mode: an object-shaped prefix (nnx.prefix(..., graph=False))
            for sub, value in _object_paths(found, (), unbox=False):
                if is_variable(value):
                    inner = where + "".join(f".{k}" for k in sub)
                    _check_entry(mode, transform, argument, inner, value, plain)
            return
        raise ValueError(
            f"{where} (in `{argument}` of nnx.{transform}) is a graph node of type {kind}. "
            "Graph nodes are not allowed as prefixes when graph=True.\n"
            f"  1. give {plain} (or a lift type) for the whole object;\n"
            "  2. build the prefix with nnx.prefix(obj, {filter: value}, graph=True);\n"
            f"  3. or use tree mode: nnx.{transform}(..., graph=False)."
        )
    if mode.updates:
        return
    instead = (
        "argnums (ints: every array of those arguments is differentiated)"
        if isinstance(found, DiffState)
        else f"{plain} for the whole object in {argument}, or nnx.prefix(obj, "
        "{filter: value}) for per-Variable values"
    )
    raise ValueError(
        f"`{argument}` cannot contain `{kind}` objects when graph=False or "
        f"graph_updates=False: nnx.{transform} was created with {mode.name}, but "
        f"{where} is {found!r}; lift types need graph updates.\n"
        f"  1. use {instead};\n"
        f"  2. or create it with graph=True, graph_updates=True (or use "
        f"nnx.compat.{transform})."
    )
