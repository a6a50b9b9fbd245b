"""Flax NNX 0.12's further members of ``State`` and ``FlatState``, as mixins over the core methods.

Source: Flax NNX 0.12 ``State.map``, ``State.raw_mapping``,
``FlatState.from_sorted_keys_values``, ``FlatState.merge``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING, Any

from flaxgraph.typing import PathParts


class StateMembers:
    """``State.map`` and ``State.raw_mapping``."""

    __slots__ = ()
    if TYPE_CHECKING:  # what State (statelib/state.py) provides
        _mapping: dict[Hashable, Any]

        def flat_state(self) -> Iterable[tuple[PathParts, Any]]: ...

        @classmethod
        def from_flat_path(cls, flat: Iterable[tuple[PathParts, Any]]) -> object: ...

    @property
    def raw_mapping(self) -> dict[Hashable, Any]:
        """The State's own top-level dict (not a copy: writing into it writes the State).

        >>> import flaxgraph as nnx
        >>> s = nnx.State({'a': 1, 'b': {'c': 2}})
        >>> type(s.raw_mapping).__name__, list(s.raw_mapping)
        ('dict', ['a', 'b'])
        """
        return self._mapping

    def map(self, f: Callable[[PathParts, Any], Any]) -> Any:
        """A new State of the same class with every leaf replaced by ``f(path, leaf)``.

        Args:
          f: ``(path, leaf) -> new leaf`` (a leaf is a Variable or a raw value).

        >>> import flaxgraph as nnx
        >>> nnx.State({'a': 1, 'b': {'c': 2}}).map(lambda p, v: v * 10).to_pure_dict()
        {'a': 10, 'b': {'c': 20}}
        """
        flat = self.flat_state()
        return type(self).from_flat_path([(p, f(p, v)) for p, v in flat])


class FlatStateMembers:
    """``FlatState.from_sorted_keys_values`` and ``FlatState.merge``."""

    __slots__ = ()

    @classmethod
    def from_sorted_keys_values(cls, keys: Iterable[PathParts], values: Iterable[Any], /) -> object:
        """A FlatState pairing ``keys[i]`` (paths, in the order wanted) with ``values[i]``.

        Raises:
          ValueError: ``keys`` and ``values`` have different lengths.

        >>> import flaxgraph as nnx
        >>> nnx.FlatState.from_sorted_keys_values((('a',), ('b',)), [1, 2]).leaves
        (1, 2)
        """
        keys, values = tuple(keys), tuple(values)
        if len(keys) != len(values):
            raise ValueError(
                f"from_sorted_keys_values got {len(keys)} keys and {len(values)} values.\n"
                "Fix: pass one value per path."
            )
        return cls(zip(keys, values))  # type: ignore[call-arg]

    @classmethod
    def merge(cls, flat_state: Iterable[tuple[PathParts, Any]], /, *flat_states: Any) -> Any:
        """One FlatState of the pairs of all arguments (FlatStates or pairs), sorted by path.

        A single FlatState comes back as is; on a repeated path the last leaf wins (Flax keeps
        all duplicates).

        >>> import flaxgraph as nnx
        >>> a = nnx.FlatState([(('b',), 2)])
        >>> nnx.FlatState.merge(a, [(('a',), 1), (('b',), 3)]).leaves
        (1, 3)
        """
        if not flat_states and isinstance(flat_state, cls):
            return flat_state
        merged: dict[PathParts, Any] = {}
        for pairs in (flat_state, *flat_states):
            for path, leaf in pairs:
                merged[tuple(path)] = leaf
        return cls(sorted(merged.items(), key=lambda kv: _path_key(kv[0])))  # type: ignore[call-arg]


def _path_key(path: PathParts) -> tuple[tuple[int, str, Any], ...]:
    # ints sort numerically and before other keys, so ('layers', 2) < ('layers', 10)
    return tuple((0, "", k) if isinstance(k, int) else (1, type(k).__name__, str(k)) for k in path)
