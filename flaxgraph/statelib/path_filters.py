"""Flax's small ``statelib`` helpers: ``create_path_filters``, ``NestedStateRepr``, types.

Source: Flax NNX 0.12.8 ``flax.nnx.statelib`` (its public source).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from flaxgraph import reprlib
from flaxgraph.filterlib import PathIn
from flaxgraph.statelib.state import State, to_flat_state, to_pure_dict
from flaxgraph.typing import PathParts

__all__ = ["ExtractValueFn", "NestedStateRepr", "SetValueFn", "create_path_filters"]

V = TypeVar("V")

ExtractValueFn = Callable[[Any], Any]
"""Reads the value out of a leaf (a Variable, an array)."""
SetValueFn = Callable[[V, Any], V]
"""Puts a value into a leaf, returning the leaf."""


def create_path_filters(state: State) -> dict[PathIn, Any]:
    """One ``PathIn`` filter per distinct value of ``state`` (Variables by value), mapped to it.

    The form ``StateSharding``/``StateAxes`` take.

    Raises:
      TypeError: a value is not hashable.

    >>> import flaxgraph as nnx
    >>> from flaxgraph.statelib import create_path_filters
    >>> filters = create_path_filters(nnx.State({'a': 0, 'b': {'c': 0, 'd': 1}}))
    >>> sorted((sorted(f.paths), v) for f, v in filters.items())
    [([('a',), ('b', 'c')], 0), ([('b', 'd')], 1)]
    """
    paths_of: dict[Any, set[PathParts]] = {}
    for path, value in to_flat_state(State(to_pure_dict(state))):  # Variables as values
        paths_of.setdefault(value, set()).add(path)
    return {PathIn(*paths): value for value, paths in paths_of.items()}


class NestedStateRepr(reprlib.Representable):
    """Renders a nested State as a plain ``{key: value, ...}`` inside its parent's ``repr``."""

    def __init__(self, state: State) -> None:
        self.state = state

    def __nnx_repr__(self) -> Iterator[reprlib.Object | reprlib.Attr]:
        yield reprlib.Object("", kv_sep=": ", start="{", end="}")
        for key, value in self.state.items():
            yield reprlib.Attr(
                repr(key), NestedStateRepr(value) if isinstance(value, State) else value
            )

    def __treescope_repr__(self, path: object, subtree_renderer: Callable[..., object]) -> object:
        children = {
            k: NestedStateRepr(v) if isinstance(v, State) else v for k, v in self.state.items()
        }
        return subtree_renderer(children, path=path)
