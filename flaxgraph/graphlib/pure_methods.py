"""Functional method calls: ``nnx.call((graphdef, state)).method(x)`` and ``GraphDef.apply``.

Source: Flax NNX 0.12 ``nnx.call`` and ``GraphDef.apply``.
"""

from __future__ import annotations

from typing import Any

from flaxgraph.graphlib.graphdefs import GraphDef
from flaxgraph.graphlib.split_merge import merge, split
from flaxgraph.statelib import State


class CallProxy:
    __slots__ = ("_graphdef", "_states", "_path", "_copy")

    def __init__(
        self,
        graphdef: GraphDef[Any],
        states: tuple[Any, ...],
        path: tuple[tuple[bool, Any], ...],
        copy: bool = False,
    ):
        self._graphdef = graphdef
        self._states = states
        self._path = path
        self._copy = copy  # merge new Variables: the given States stay as they are

    def __getattr__(self, name: str) -> CallProxy:
        return CallProxy(self._graphdef, self._states, (*self._path, (False, name)), self._copy)

    def __getitem__(self, key: object) -> CallProxy:
        # ``nnx.call(dict_state)['b'].method()``: an item of the merged graph.
        return CallProxy(self._graphdef, self._states, (*self._path, (True, key)), self._copy)

    def __call__(self, *args: object, **kwargs: object) -> tuple[Any, tuple[GraphDef[Any], State]]:
        node = merge(self._graphdef, *self._states, copy=self._copy)
        method: Any = node
        for is_item, key in self._path:
            method = method[key] if is_item else getattr(method, key)
        out = method(*args, **kwargs)
        return out, split(node)


def call(graphdef_state: tuple[Any, ...], /) -> Any:
    """Functional method calls: ``out, (graphdef, state) = nnx.call((graphdef, state)).method(x)``.

    The proxy merges, calls the method (``__call__`` when called directly; attributes and
    items lead to it: ``nnx.call(state)['encoder'].method(x)``), splits again and returns
    the output with the new ``(graphdef, state)``. Outside a transform the call also writes
    the given State's Variables (``merge`` reuses them).

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> graphdef, state = nnx.split(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    >>> y, (graphdef2, state2) = nnx.call((graphdef, state))(jnp.ones(2))
    >>> y.shape, graphdef2 == graphdef
    ((3,), True)
    """
    graphdef, *states = graphdef_state
    return CallProxy(graphdef, tuple(states), ())


def _graphdef_apply(self: GraphDef[Any], state: object, *states: object) -> object:
    """``graphdef.apply(state).method(*args)``: as ``call``, returning the new pair too."""
    return call((self, state, *states))


# GraphDef (graphlib/graphdefs.py) sits below this module, so its `apply` is attached here.
GraphDef.apply = _graphdef_apply  # type: ignore[method-assign]
