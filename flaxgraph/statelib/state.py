"""``State`` and ``FlatState``: a graph's leaves as a nested mapping that is a JAX pytree.

The package README says what a State holds. Source: Flax NNX 0.12 ``nnx.State`` and
the module-level functions of ``nnx.statelib``.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from typing import Any

import jax

from flaxgraph.errors import GraphStructureError, UnmatchedLeafError
from flaxgraph.filterlib import Filter, Predicate, filters_to_predicates, partition_predicates
from flaxgraph.filterlib import to_predicate as to_predicate
from flaxgraph.renderers import RENDERERS
from flaxgraph.statelib.members import FlatStateMembers, StateMembers
from flaxgraph.statelib.pytree import state_pytree_functions
from flaxgraph.typing import Key, PathParts
from flaxgraph.variablelib.variable import Variable, is_variable


class State(StateMembers, MutableMapping[Key, Any]):
    """A nested mapping of path keys to Variables or raw values; a JAX pytree.

    Args:
      mapping: a (nested) mapping; nested plain dicts become States.

    >>> import jax, jax.numpy as jnp, flaxgraph as nnx
    >>> s = nnx.State({'linear': {'kernel': nnx.Param(jnp.ones((2, 3)))}})
    >>> jax.tree.map(jnp.shape, s.to_pure_dict())
    {'linear': {'kernel': (2, 3)}}

    ``State[K, V]`` is a valid annotation (it has no effect at run time).
    """

    __slots__ = ("_mapping", "_state_keys")
    __class_getitem__: object = classmethod(types.GenericAlias)

    def __init__(self, mapping: Mapping[Key, Any] | Iterable[tuple[Key, Any]] = (), /):
        items = mapping.items() if isinstance(mapping, Mapping) else mapping
        self._mapping: dict[Key, Any] = {
            k: (State(v) if type(v) is dict or (isinstance(v, State) and v is not self) else v)
            for k, v in items
        }
        self._state_keys: Any = None  # the pytree keys cache (statelib/pytree.py)

    @classmethod
    def _wrap(cls, mapping: dict[Key, Any]) -> State:
        state = object.__new__(cls)
        _set_mapping(state, mapping)
        _set_keys(state, None)
        return state

    def __getitem__(self, key: Key) -> object:
        return self._mapping[key]

    def __setitem__(self, key: Key, value: object) -> None:
        self._mapping[key] = State(value) if type(value) is dict else value

    def __delitem__(self, key: Key) -> None:
        del self._mapping[key]

    def __iter__(self) -> Iterator[Key]:
        return iter(self._mapping)

    def __len__(self) -> int:
        return len(self._mapping)

    def __contains__(self, key: object) -> bool:
        return key in self._mapping

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self._mapping[name]
        except KeyError:
            keys = list(self._mapping)
            raise AttributeError(f"State has no key {name!r}; keys are {keys}") from None

    def __setattr__(self, name: str, value: object) -> None:
        if name in ("_mapping", "_state_keys"):
            super().__setattr__(name, value)
        else:
            self[name] = value

    # Display sits above this layer: it registers the renderers (flaxgraph/renderers.py).
    def __repr__(self) -> str:
        return RENDERERS.text("state", self)

    def __treescope_repr__(self, path: object, subtree_renderer: object) -> object:
        return RENDERERS.treescope("state", self, path, subtree_renderer)

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict[str, Any]:
        return RENDERERS.mimebundle(self, include, exclude)

    def flat_state(self) -> FlatState:
        """Returns the leaves as a ``FlatState`` of ``(path, leaf)`` pairs, depth-first."""
        out: list[tuple[PathParts, Any]] = []
        _flatten_into(self, (), out)
        return FlatState(out)

    @classmethod
    def from_flat_path(cls, flat: Iterable[tuple[PathParts, Any]]) -> State:
        """Builds a nested State from ``(path, leaf)`` pairs (fastest in depth-first order).

        Raises:
          GraphStructureError: one path is a prefix of another, or a path is empty.
        """
        root = cls._wrap({})
        prev: tuple[Key, ...] = ()
        stack: list[State] = [root]  # stack[i] is the State at prev[:i]
        for path, leaf in flat:
            n = len(path)
            if not n:
                raise GraphStructureError("A State leaf needs a non-empty path.")
            # Longest common prefix with the previous path, among its sub-states.
            common = 0
            limit = min(n - 1, len(stack) - 1)
            while common < limit and path[common] == prev[common]:
                common += 1
            del stack[common + 1 :]
            node = stack[common]
            for i in range(common, n - 1):
                key = path[i]
                child = node._mapping.get(key, _MISSING)
                if child is _MISSING:
                    child = node._mapping[key] = cls._wrap({})
                elif type(child) is not cls:
                    raise GraphStructureError(
                        f"Path {_slashed(path)} goes through the leaf at {_slashed(path[: i + 1])}."
                    )
                stack.append(child)
                node = child
            if type(node._mapping.get(path[-1])) is cls:
                raise GraphStructureError(f"Path {_slashed(path)} is both a leaf and a sub-state.")
            node._mapping[path[-1]] = leaf
            prev = path
        return root

    def filter(self, first: Filter, /, *filters: Filter) -> Any:
        """Returns the sub-state matching each filter (one State per filter; leaves
        matching none are dropped). With one filter, returns one State."""
        return _nested(self.flat_state().filter(first, *filters), filters)

    def split(self, first: Filter, /, *filters: Filter) -> Any:
        """Partitions the leaves by filters (first match wins); one State per filter.

        Raises:
          UnmatchedLeafError (a ``ValueError``): a leaf matches no filter; add a
            final ``...`` to collect the rest.
        """
        return _nested(self.flat_state().split(first, *filters), filters)

    @staticmethod
    def merge(state: Mapping[Key, Any], /, *states: Mapping[Key, Any]) -> State:
        """Deep-merges States into a new one; later States win on equal paths."""
        flat: dict[PathParts, Any] = {}
        for s in (state, *states):
            flat.update((s if isinstance(s, State) else State(s)).flat_state())
        return State.from_flat_path(flat.items())

    def to_pure_dict(self) -> dict[Key, Any]:
        """Returns nested plain dicts of raw values (Variables unboxed); for checkpoints."""
        return {
            k: v.to_pure_dict() if isinstance(v, State) else (v.raw_value if is_variable(v) else v)
            for k, v in self._mapping.items()
        }

    def replace_by_pure_dict(
        self,
        pure_dict: Mapping[Any, Any],
        replace_fn: Callable[[Any, Any], Any] | None = None,
    ) -> None:
        """Replaces, in place, this State's leaf values by those of ``pure_dict``.

        ``pure_dict`` is shaped as ``to_pure_dict`` returns; digit-string keys (``'0'``) match
        int keys. ``replace_fn(leaf, value)`` builds the new leaf (default: a Variable's
        ``replace``, a raw leaf becomes the value).

        Raises:
          GraphStructureError: ``pure_dict`` has a path this State lacks, or a leaf where this
            State has a sub-state. Nothing is replaced then.
        """
        replace_fn = replace_fn or replace_leaf
        writes: list[tuple[State, Key, Any]] = []
        for path, value in _pure_items(pure_dict, ()):
            node: Any = self
            for i, raw_key in enumerate(path):
                key = _match_key(node, raw_key)
                if key is _MISSING:
                    raise GraphStructureError(
                        f"pure_dict has the path {_slashed(path)}, but the State has no key "
                        f"{raw_key!r} at {_slashed(path[:i]) or '<root>'}."
                    )
                if i == len(path) - 1:
                    if isinstance(node._mapping[key], State):
                        raise GraphStructureError(
                            f"pure_dict has a leaf at {_slashed(path)}, but the State has a "
                            "sub-state there."
                        )
                    writes.append((node, key, value))
                else:
                    node = node._mapping[key]
        for node, key, value in writes:  # all paths checked: nothing is half-replaced
            node._mapping[key] = replace_fn(node._mapping[key], value)


_MISSING = object()


def _slashed(path: PathParts) -> str:
    return "/".join(map(str, path))


def _nested(flat: Any, several: tuple[Filter, ...]) -> Any:
    """The nested State of a ``FlatState``, or a tuple of them (``several`` filters)."""
    return tuple(f.to_nested_state() for f in flat) if several else flat.to_nested_state()


def _match_key(node: object, key: object) -> object:
    if not isinstance(node, State):
        return _MISSING
    if key in node._mapping:
        return key
    if isinstance(key, str) and key.lstrip("-").isdigit() and int(key) in node._mapping:
        return int(key)
    return _MISSING


def replace_leaf(leaf: object, value: object) -> object:
    """``leaf.replace(value)`` for a Variable, else ``value`` (``replace_by_pure_dict``'s default)."""
    return leaf.replace(value) if is_variable(leaf) else value


def _pure_items(d: Mapping[Any, Any], prefix: PathParts) -> Iterator[tuple[PathParts, Any]]:
    for k, v in d.items():
        if isinstance(v, Mapping) and not is_variable(v):
            yield from _pure_items(v, (*prefix, k))
        else:
            yield (*prefix, k), v


def _flatten_into(state: State, prefix: PathParts, out: list[tuple[PathParts, Any]]) -> None:
    for k, v in state._mapping.items():
        # (State is an ABC, whose isinstance check is slow: Variables are ruled out first)
        if type(v) is State or (not isinstance(v, Variable) and isinstance(v, State)):
            _flatten_into(v, (*prefix, k), out)
        else:
            out.append(((*prefix, k), v))


def map_state(f: Callable[[PathParts, Any], Any], state: State) -> State:
    """Returns a new State with every leaf replaced by ``f(path, leaf)``.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> s = nnx.State({'w': nnx.Param(jnp.ones(2))})
    >>> nnx.map_state(lambda p, v: v.replace(v.value * 2), s)['w'].value
    Array([2., 2.], dtype=float32)
    """
    return State.from_flat_path((p, f(p, v)) for p, v in state.flat_state())


class FlatState(FlatStateMembers, tuple[Any, ...]):
    """A State in flat form: a tuple of ``(path, leaf)`` pairs, in walk order."""

    __slots__ = ()

    @property
    def paths(self) -> tuple[PathParts, ...]:
        """The path of every pair, in order."""
        return tuple(p for p, _ in self)

    @property
    def leaves(self) -> tuple[Any, ...]:
        """The leaf (Variable or raw value) of every pair, in order."""
        return tuple(v for _, v in self)

    def to_nested_state(self) -> State:
        """The nested ``State`` these pairs describe (``State.from_flat_path``)."""
        return State.from_flat_path(self)

    def filter(self, first: Filter, /, *filters: Filter) -> Any:
        """One FlatState per filter with the pairs it matches (first match wins)."""
        parts, _ = partition(self, filters_to_predicates((first, *filters)))
        return tuple(parts) if filters else parts[0]

    def split(self, first: Filter, /, *filters: Filter) -> Any:
        """Like ``filter``, but a pair matching no filter raises ``UnmatchedLeafError``."""
        parts, rest = partition(self, partition_predicates((first, *filters)))
        if rest:
            raise UnmatchedLeafError(unmatched_message(_slashed(rest[0][0]), rest[0][1]))
        return tuple(parts) if filters else parts[0]


def partition(
    pairs: Iterable[tuple[PathParts, Any]], predicates: tuple[Predicate, ...]
) -> tuple[list[FlatState], list[tuple[PathParts, Any]]]:
    """Sorts pairs into one bucket per predicate (first match wins) plus a rest."""
    buckets: list[list[tuple[PathParts, Any]]] = [[] for _ in predicates]
    rest: list[tuple[PathParts, Any]] = []
    for pair in pairs:
        for bucket, predicate in zip(buckets, predicates):
            if predicate(*pair):
                bucket.append(pair)
                break
        else:
            rest.append(pair)
    return [FlatState(b) for b in buckets], rest


def unmatched_message(where: str, leaf: object) -> str:
    """The message of ``UnmatchedLeafError`` for ``leaf`` at ``where``."""
    kind = type(leaf).__name__
    return (
        f"The {kind} at {where} matches none of the filters given to split "
        "(Non-exhaustive filters, got a non-empty remainder). Every leaf must match one "
        "filter.\nFix: add a filter that matches it, or end the filters "
        "with `...` to collect the rest."
    )


def to_flat_state(state: State) -> FlatState:
    """Returns ``state`` in flat form: a ``FlatState`` of ``(path, leaf)`` pairs.

    >>> import flaxgraph as nnx
    >>> nnx.to_flat_state(nnx.State({'a': {'b': 1}, 'c': 2})).paths
    (('a', 'b'), ('c',))
    """
    return state.flat_state()


def from_flat_state(
    flat_state: Mapping[PathParts, Any] | Iterable[tuple[PathParts, Any]], *, cls: type = State
) -> State:
    """Builds a nested State from ``(path, leaf)`` pairs or a ``{path: leaf}`` mapping.

    Raises:
      GraphStructureError (a ``ValueError``): a path is empty, or is both a leaf and
        a sub-state.

    >>> import flaxgraph as nnx
    >>> nnx.from_flat_state([(('a', 0), 1)]).to_pure_dict()
    {'a': {0: 1}}
    """
    pairs = flat_state.items() if isinstance(flat_state, Mapping) else flat_state
    typed: State = cls.from_flat_path(pairs)  # type: ignore[attr-defined]
    return typed


def diff(state: State, other: State) -> State:
    """The leaves of ``state`` at paths ``other`` lacks (values are not compared).

    Args:
      state: a State.
      other: another State (e.g. of a smaller model).

    Returns:
      A State of those leaves (``state`` itself if ``other`` is empty).

    >>> import flaxgraph as nnx
    >>> a = nnx.State({'x': 1, 'y': {'z': 2}})
    >>> nnx.statelib.diff(a, nnx.State({'x': 5})).to_pure_dict()
    {'y': {'z': 2}}
    """
    if not other:
        return state
    known = set(other.flat_state().paths)
    return State.from_flat_path((p, v) for p, v in state.flat_state() if p not in known)


def filter_state(state: State, first: Filter, /, *filters: Filter) -> object:
    """``state.filter(first, *filters)``: the sub-state each filter matches (leaves
    matching none are dropped); one State for one filter, else a tuple.

    >>> import flaxgraph as nnx
    >>> s = nnx.State({'a': nnx.Param(1), 'b': nnx.BatchStat(2)})
    >>> list(nnx.filter_state(s, nnx.Param))
    ['a']
    """
    return state.filter(first, *filters)


def split_state(state: State, first: Filter, /, *filters: Filter) -> object:
    """``state.split(first, *filters)``: partitions the leaves (first match wins).

    Raises:
      UnmatchedLeafError (a ``ValueError``): a leaf matches no filter (end with ``...``).

    >>> import flaxgraph as nnx
    >>> s = nnx.State({'a': nnx.Param(1), 'b': nnx.BatchStat(2)})
    >>> [list(x) for x in nnx.split_state(s, nnx.Param, nnx.BatchStat)]
    [['a'], ['b']]
    """
    return state.split(first, *filters)


def merge_state(
    state: Mapping[Key, Any], /, *states: Mapping[Key, Any], cls: type = State
) -> object:
    """Deep-merges States (or nested mappings) into a new one; later ones win on equal paths.

    >>> import flaxgraph as nnx
    >>> nnx.merge_state(nnx.State({'a': {'b': 1}}), {'a': {'c': 2}}).to_pure_dict()
    {'a': {'b': 1, 'c': 2}}
    """
    merged = State.merge(state, *states)
    return merged if cls is State else cls.from_flat_path(merged.flat_state())  # type: ignore[attr-defined]


def to_pure_dict(state: State, extract_fn: Callable[[Any], Any] | None = None) -> dict[Key, Any]:
    """Nested plain dicts of raw values: ``state.to_pure_dict()``, or with every leaf
    passed through ``extract_fn`` (default: a Variable gives its raw value).

    >>> import flaxgraph as nnx
    >>> nnx.to_pure_dict(nnx.State({'w': nnx.Param(1)}), lambda v: v.raw_value * 10)
    {'w': 10}
    """
    if extract_fn is None:
        return state.to_pure_dict()
    return map_state(lambda _, v: extract_fn(v), state).to_pure_dict()


def replace_by_pure_dict(
    state: State,
    pure_dict: Mapping[Any, Any],
    replace_fn: Callable[[Any, Any], Any] | None = None,
) -> None:
    """``state.replace_by_pure_dict(pure_dict, replace_fn)`` (see there).

    Raises:
      GraphStructureError (a ``ValueError``): ``pure_dict`` does not fit ``state``;
        nothing is replaced then.

    >>> import flaxgraph as nnx
    >>> s = nnx.State({'w': nnx.Param(1)})
    >>> nnx.replace_by_pure_dict(s, {'w': 2}); s['w'].value
    2
    """
    state.replace_by_pure_dict(pure_dict, replace_fn)


def restore_int_paths(pure_dict: Mapping[Any, Any]) -> dict[Any, Any]:
    """Returns ``pure_dict`` with every string key made of digits turned into an int
    (list indices come back as strings from JSON and some checkpoint formats).

    >>> import flaxgraph as nnx
    >>> nnx.restore_int_paths({'layers': {'0': 1, '1': {'2': 3}}, 'w': 4})
    {'layers': {0: 1, 1: {2: 3}}, 'w': 4}
    """
    return {
        (int(k) if isinstance(k, str) and k.isdigit() else k): (
            restore_int_paths(v) if isinstance(v, Mapping) and not is_variable(v) else v
        )
        for k, v in pure_dict.items()
    }


_set_mapping = State._mapping.__set__  # type: ignore[attr-defined, misc]
_set_keys = State._state_keys.__set__  # type: ignore[misc]

# A State is a pytree whose children are its entries (statelib/pytree.py).
jax.tree_util.register_pytree_with_keys(State, *state_pytree_functions(State))
# A FlatState is a pytree too (as in Flax NNX 0.12): its leaves are the pairs' leaves,
# its paths are static.
jax.tree_util.register_pytree_with_keys(
    FlatState,
    lambda fs: (tuple(zip(map(jax.tree_util.SequenceKey, range(len(fs))), fs.leaves)), fs.paths),
    lambda paths, leaves: FlatState(zip(paths, leaves)),
    lambda fs: (fs.leaves, fs.paths),
)
