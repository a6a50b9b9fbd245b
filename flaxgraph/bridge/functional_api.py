"""``bridge.functional``: a flaxgraph Module class used Linen-style (``init`` -> State,
``apply(state)`` -> a call returning ``(output, new_state)``).

Source: Flax NNX 0.12 ``nnx.bridge.functional`` / ``nnx.bridge.Functional``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from flaxgraph.graphlib.graphdefs import GraphDef
from flaxgraph.graphlib.split_merge import split
from flaxgraph.module_class import Module
from flaxgraph.rnglib.rngs import Rngs
from flaxgraph.statelib import State

M = TypeVar("M", bound=Module)

__all__ = ["Functional", "functional"]


@dataclasses.dataclass
class Functional(Generic[M]):
    """A Module class with its constructor arguments, used functionally.

    Attributes:
      module_type: the flaxgraph Module class.
      graphdef: set by ``init``.
      args, kwargs: constructor arguments.

    Raises:
      ValueError: ``apply`` before ``init``.
    """

    module_type: type[M]
    graphdef: GraphDef[M] | None
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def init(self, *, rngs: Rngs | None = None) -> State:
        """Builds the Module and returns its State (keeping its GraphDef)."""
        extra = {} if rngs is None else {"rngs": rngs}
        self.graphdef, state = split(self.module_type(*self.args, **self.kwargs, **extra))
        return state

    def apply(self, *states: Any) -> Any:
        """``graphdef.apply(*states)``: call it to get ``(output, (graphdef, new_state))``."""
        if self.graphdef is None:
            raise ValueError(
                "Functional.apply was called before init.\nFix: `state = f.init(rngs=nnx.Rngs(0))` "
                "first, then `f.apply(state)(x)`."
            )
        return self.graphdef.apply(*states)


def functional(cls: type[M]) -> Callable[..., Functional[M]]:
    """``functional(Cls)(*args, **kwargs)`` -> a ``Functional`` holding the class and arguments.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> f = nnx.bridge.functional(nnx.Linear)(2, 3)
    >>> y, _ = f.apply(f.init(rngs=nnx.Rngs(0)))(jnp.ones((1, 2)))
    >>> y.shape
    (1, 3)
    """

    def construct(*args: Any, **kwargs: Any) -> Functional[M]:
        return Functional(cls, None, args, kwargs)

    return construct
