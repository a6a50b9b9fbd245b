"""``GraphState``: a State bundled with its GraphDef (what ``nnx.unpack`` returns).

Source: Flax NNX 0.12 ``nnx.GraphState`` / ``nnx.unpack``.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, MutableMapping
from typing import Any, TypeVar

import jax

from flaxgraph.graphlib.graphdefs import GraphDef
from flaxgraph.statelib import State


class GraphState(MutableMapping[Hashable, Any]):
    """A ``State`` with its ``GraphDef``: a mutable mapping over the State, and a pytree.

    The State's leaves are the children, the GraphDef static aux data.

    Args:
      _graphdef: the structure (``GraphDef``).
      _state: the State (or a Variable/array for a graph whose root is a leaf).

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> class M(nnx.Module):
    ...   def __init__(self):
    ...     self.w = nnx.Param(jnp.ones(2))
    >>> gs = nnx.unpack(M())
    >>> list(gs), type(nnx.merge(gs)).__name__
    (['w'], 'M')
    """

    __slots__ = ("_graphdef", "_state")

    def __init__(self, _graphdef: GraphDef[Any], _state: Any):
        self._graphdef = _graphdef
        self._state = _state

    @property
    def graphdef(self) -> GraphDef[Any]:
        """The structure."""
        return self._graphdef

    @property
    def state(self) -> Any:
        """The State."""
        return self._state

    def __getitem__(self, key: Hashable) -> object:
        return self._state[key]

    def __setitem__(self, key: Hashable, value: object) -> None:
        self._state[key] = value

    def __delitem__(self, key: Hashable) -> None:
        del self._state[key]

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._state) if isinstance(self._state, State) else iter(())

    def __len__(self) -> int:
        return len(self._state) if isinstance(self._state, State) else 0

    def __getattr__(self, name: str) -> object:
        # Only reached for names that are not slots/methods: read the State's key.
        if name.startswith("__"):
            raise AttributeError(name)
        state = object.__getattribute__(self, "_state")
        if isinstance(state, State) and name in state:
            return state[name]
        raise AttributeError(
            f"GraphState has no attribute or State key {name!r}; its keys: "
            f"{sorted(map(str, self))}."
        )

    def __setattr__(self, name: str, value: object) -> None:
        if name in GraphState.__slots__:
            super().__setattr__(name, value)
        else:
            self._state[name] = value

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is GraphState
            and self._graphdef == other._graphdef
            and self._state == other._state
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"GraphState(_graphdef={self._graphdef!r}, _state={self._state!r})"


# A GraphState flattens like its State (same children, same key paths), with the
# GraphDef in the aux data, so paths into ``unpack(m)`` equal paths into ``state(m)``.


def _flatten_with_keys(
    gs: GraphState,
) -> tuple[tuple[tuple[object, object], ...], tuple[GraphDef[Any], tuple[Hashable, ...] | None]]:
    state = gs._state
    if isinstance(state, State):
        keys = tuple(state._mapping)
        children = tuple((jax.tree_util.DictKey(k), state._mapping[k]) for k in keys)
        return children, (gs._graphdef, keys)
    return ((jax.tree_util.GetAttrKey("_state"), state),), (gs._graphdef, None)


def _flatten(
    gs: GraphState,
) -> tuple[tuple[object, ...], tuple[GraphDef[Any], tuple[Hashable, ...] | None]]:
    state = gs._state
    if isinstance(state, State):
        return tuple(state._mapping.values()), (gs._graphdef, tuple(state._mapping))
    return (state,), (gs._graphdef, None)


def _unflatten(
    aux: tuple[GraphDef[Any], tuple[Hashable, ...] | None], children: Iterable[Any]
) -> GraphState:
    graphdef, keys = aux
    if keys is None:
        (state,) = children
        return GraphState(graphdef, state)
    return GraphState(graphdef, State._wrap(dict(zip(keys, children))))


jax.tree_util.register_pytree_with_keys(GraphState, _flatten_with_keys, _unflatten, _flatten)

A = TypeVar("A")

PureState = tuple[GraphDef[A], State]
"""The type of ``(graphdef, state)`` pairs (Flax NNX 0.12 ``nnx.PureState``)."""

__all__ = ["GraphState", "PureState"]
