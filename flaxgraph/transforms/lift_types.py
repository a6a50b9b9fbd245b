"""Lift types: how to transform the sub-states of one object.

JAX transforms take *prefix* trees (``in_axes``, ``in_shardings``, ``argnums``)
that say how to treat each part of the arguments. An object is one position in
that tree, so a plain prefix (``0``, ``None``, a sharding) applies to all of its
state. A *lift type* placed at an object's position instead maps filters to
prefixes, one per sub-state:

* ``StateAxes({nnx.Param: 0, nnx.BatchStat: None})`` in ``vmap``/``pmap``/``scan``
  ``in_axes``/``out_axes``: Params mapped on axis 0, BatchStats broadcast.
* ``StateSharding({nnx.Param: sharding, ...: None})`` in ``jit``'s
  ``in_shardings``/``out_shardings``.
* ``DiffState(argnum, filter)`` in ``grad``'s ``argnums``: differentiate the
  sub-state of argument ``argnum`` that ``filter`` selects.

Each leaf under the object takes the prefix of the first filter it matches
(paths relative to the object); a leaf that matches none is an error. A lift
type is sugar for "split by these filters and give each group a plain prefix",
which is exactly how the lifting machine compiles it.

Source: the JAX-style NNX transforms design note (seed 002) and guide (seed 003).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from flaxgraph.filterlib import Filter, Predicate, to_predicate

PathParts = tuple[Hashable, ...]


class PrefixMapping:
    """Base of lift types: an ordered mapping filter -> prefix.

    Args:
      filter_prefixes: a mapping (or iterable of pairs) from filters to prefixes, or
        a ``State`` of prefixes (each leaf gets the prefix at its own path, as
        ``StateSharding(nnx.get_named_sharding(state, mesh))`` in Flax NNX 0.12).

    Equality and hash are by (type, filters, prefixes), so two equal lift types at
    two aliases count as the same prefix.
    """

    __slots__ = ("filters", "prefixes", "predicates")
    distributes = False
    """If True the mapping may stand for a whole pytree: each object inside gets it
    and each raw leaf outside objects gets ``leaf_prefix`` (used by ``grad``)."""
    leaf_prefix: Any = None
    variable_prefix: Any = None
    """If not None (with ``distributes``), the prefix of a Variable reached without
    passing through an object (e.g. in a ``State`` argument); otherwise such a
    Variable is matched against the filters like one inside an object."""

    def __init__(self, filter_prefixes: Mapping[Filter, Any] | Iterable[tuple[Filter, Any]], /):
        if hasattr(filter_prefixes, "flat_state"):  # a State: one entry per path
            items = [(_AtPath(p), _unbox(v)) for p, v in filter_prefixes.flat_state()]
        else:
            items = list(
                filter_prefixes.items() if isinstance(filter_prefixes, Mapping) else filter_prefixes
            )
        self.filters = tuple(f for f, _ in items)
        self.prefixes = tuple(p for _, p in items)
        self.predicates: tuple[Predicate, ...] = tuple(to_predicate(f) for f in self.filters)

    def prefix_of(self, path: PathParts, value: Any) -> Any:
        """The prefix of the leaf at ``path`` (relative to the object), or ``_NO_MATCH``."""
        for predicate, prefix in zip(self.predicates, self.prefixes):
            if predicate(path, value):
                return prefix
        return NO_MATCH

    def items(self) -> list[tuple[Filter, Any]]:
        """The ``(filter, prefix)`` pairs, in order."""
        return list(zip(self.filters, self.prefixes))

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and self.filters == other.filters  # type: ignore[attr-defined]
            and self.prefixes == other.prefixes  # type: ignore[attr-defined]
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

    def __call__(self, path: PathParts, value: Any) -> bool:
        return tuple(path) == self.path

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _AtPath) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    def __repr__(self) -> str:
        return "/".join(map(str, self.path)) or "<root>"


def _unbox(v: Any) -> Any:
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


NO_MATCH: Any = _NoMatch()


class StateAxes(PrefixMapping):
    """Per-filter axes for one object in ``vmap``/``pmap``/``scan`` ``in_axes``/``out_axes``.

    Values are ints (the mapped axis), ``None`` (broadcast), or, in ``scan``,
    ``nnx.Carry`` (carried state).

    Example::

      state_axes = nnx.StateAxes({nnx.Param: 0, Count: None})
      y = nnx.vmap(f, in_axes=(state_axes, 0))(weights, x)

    Source: seed 002/003 (JAX-style NNX transforms).
    """

    __slots__ = ()


class StateSharding(PrefixMapping):
    """Per-filter shardings for one object in ``jit``'s ``in_shardings``/``out_shardings``.

    Values are ``jax.sharding.Sharding`` instances, ``PartitionSpec`` (with a mesh
    in context) or ``None`` (let the compiler choose).

    Source: seed 003 (lift types table).
    """

    __slots__ = ()


class DiffState:
    """Differentiate the sub-state ``filter`` selects in argument ``argnum``.

    Used in ``argnums`` of ``grad``, ``value_and_grad``, ``vjp`` and ``custom_vjp``:
    ``nnx.grad(loss_fn, argnums=nnx.DiffState(0, LoRAParam))``.

    Args:
      argnum: the position of the argument.
      filter: which of its leaves are differentiated (default ``nnx.Param``).

    Source: seed 002 (DiffState).
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


class StatePrefix:
    """A ``State`` used as a prefix at an object: each leaf takes the value at its own
    path (Variables are unboxed). This is what ``nnx.get_named_sharding(state, mesh)``
    or ``nnx.get_partition_spec(state)`` produce, so they can be given directly as
    ``jit``'s ``in_shardings``/``out_shardings`` for a model.
    """

    __slots__ = ("state", "by_path")

    def __init__(self, state: Any):
        from flaxgraph.variablelib.variable import Variable

        self.state = state
        self.by_path = {
            p: (v.raw_value if isinstance(v, Variable) else v) for p, v in state.flat_state()
        }

    @property
    def prefixes(self) -> tuple[Any, ...]:
        return tuple(self.by_path.values())

    def prefix_of(self, path: PathParts, value: Any) -> Any:
        return self.by_path.get(path, NO_MATCH)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StatePrefix) and other.state is self.state

    def __hash__(self) -> int:
        return id(self.state)

    def __repr__(self) -> str:
        return f"State prefix with {len(self.by_path)} leaves"


def reject_lift_types(
    mode: Any, transform: str, argument: str, *trees: Any, plain: str = "a plain prefix"
) -> None:
    """Lift types need graph updates: raises if ``trees`` (prefix trees such as
    ``in_axes`` or ``argnums``) hold one while ``mode`` has none. ``plain`` says what
    to give instead (``'an int or None'``).

    Raises:
      ValueError: a ``StateAxes``, ``StateSharding`` or ``DiffState`` is given to a
        transform created with ``graph=False`` or ``graph_updates=False``; the message
        says what to use instead.
    """
    if mode.updates:
        return

    def find(t: Any) -> Any:
        if isinstance(t, (PrefixMapping, DiffState)):
            return t
        if isinstance(t, (tuple, list)):
            return next((x for x in map(find, t) if x is not None), None)
        if isinstance(t, dict):
            return next((x for x in map(find, t.values()) if x is not None), None)
        return None

    for tree in trees:
        found = find(tree)
        if found is not None:
            kind = type(found).__name__
            instead = (
                "argnums (ints: every array of those arguments is differentiated)"
                if isinstance(found, DiffState)
                else f"{plain} for the whole object in {argument}"
            )
            raise ValueError(
                f"nnx.{transform} was created with {mode.name}, but its {argument} holds a "
                f"{kind} ({found!r}); lift types need graph updates.\n"
                f"  1. use {instead};\n"
                f"  2. or create it with graph=True, graph_updates=True (or use "
                f"nnx.compat.{transform})."
            )
