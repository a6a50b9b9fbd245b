"""``PytreeState``: the record Flax's ``Pytree`` exposes to subclasses as ``_pytree__state``.

Built from the object's own trace slot; a JAX pytree with no leaves (the flags are the
aux data). Source: Flax NNX 0.12 ``flax.nnx.pytreelib.PytreeState``.
"""

from __future__ import annotations

import jax

from flaxgraph.tracing import TraceState


class PytreeState:
    """The trace an object was created in, and two flags.

    Args:
      initializing: whether the object is being initialized (Flax's Linen bridge).
      is_setup: whether a bridged module's ``setup`` has run (idem).

    >>> import flaxgraph as nnx
    >>> state = nnx.pytreelib.PytreeState()
    >>> state.trace_state.is_valid(), state.initializing, state.is_setup
    (True, False, False)
    """

    __slots__ = ("_trace_state", "_initializing", "_is_setup")

    def __init__(self, initializing: bool = False, is_setup: bool = False) -> None:
        self._trace_state = TraceState()
        self._initializing = initializing
        self._is_setup = is_setup

    @classmethod
    def of_trace(cls, token: object) -> PytreeState:
        """The state of an object created in the trace whose token is ``token``."""
        state = cls()
        state._trace_state = TraceState.of(token)
        return state

    def retrace(self, token: object) -> None:
        """Names the trace whose token is ``token`` (the object moved); the flags stay."""
        self._trace_state = TraceState.of(token)

    @property
    def trace_state(self) -> TraceState:
        """The trace the object was created in."""
        return self._trace_state

    @property
    def initializing(self) -> bool:
        return self._initializing

    @property
    def is_setup(self) -> bool:
        return self._is_setup

    def _flags(self) -> tuple[bool, bool]:
        return (self._initializing, self._is_setup)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PytreeState) and self._flags() == other._flags()

    def __hash__(self) -> int:
        return hash(self._flags())

    def __repr__(self) -> str:
        return f"PytreeState(trace_state={self._trace_state!r})"


jax.tree_util.register_pytree_node(
    PytreeState, lambda s: ((), s._flags()), lambda flags, _: PytreeState(*flags)
)
