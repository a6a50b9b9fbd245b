"""Which JAX trace is active: the token Objects and Variables record at creation.

An object created outside a transform must not be mutated inside it (the new
value would be a tracer that leaks out). Each Object and Variable records the
trace that was active when it was created; a mutation compares that record with
the current trace. The token is the weak reference JAX's current trace keeps to
itself: the same object for as long as the trace lives (so comparisons are
cheap), and it does not keep the trace alive. JAX exposes it only through
private modules (``jax._src.core``, the same value its
``get_opaque_trace_state`` wraps); this file is the one place that touches them.
"""

from __future__ import annotations

import jax
from jax._src import core as _jax_core

trace_ctx = _jax_core.trace_ctx

TRACE_STATE = _jax_core.trace_state
"""JAX's thread-local config holding the current trace's weak reference:
``TRACE_STATE.value`` is ``current_trace()`` without a Python call (JAX sets it with
the trace, see ``TracingContext.set_trace``); for per-object hot paths (unflatten)."""


def current_trace() -> object:
    """Returns a token for the active JAX trace; equal tokens, same trace."""
    return TRACE_STATE.value


def is_top_level() -> bool:
    """Whether no JAX transform is tracing (code runs eagerly, outside jit/grad/vmap)."""
    return trace_ctx.is_top_level()


class TraceState:
    """The JAX trace an object or a Variable was created in, as Flax NNX exposes it
    to subclasses (``Variable._trace_state``, ``Pytree._pytree__state.trace_state``).

    Made with no argument, it records the current trace. ``is_valid()`` tells whether
    the current trace is still that one (a mutation is allowed); two states are equal
    when they record the same trace. A pickled state records, once unpickled, the
    trace it is unpickled in.

    Example::

      >>> import jax
      >>> from flaxgraph.tracing import TraceState
      >>> outside = TraceState()
      >>> outside.is_valid()
      True
      >>> jax.jit(lambda x: (x, outside.is_valid())[0])(1) is not None
      True

    Source: Flax NNX 0.12 ``flax.nnx.tracers.TraceState``.
    """

    __slots__ = ("_jax_trace",)

    def __init__(self) -> None:
        self._jax_trace = current_trace()

    @classmethod
    def of(cls, token: object) -> TraceState:
        """The state recording the trace whose token (``current_trace()``) is ``token``."""
        state = object.__new__(cls)
        state._jax_trace = token
        return state

    @property
    def jax_trace(self) -> object:
        """The recorded trace's token (see ``current_trace``)."""
        return self._jax_trace

    def is_valid(self) -> bool:
        """Whether the current JAX trace is the recorded one."""
        return self._jax_trace == current_trace()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TraceState) and self._jax_trace == other._jax_trace

    def __hash__(self) -> int:
        return hash(self._jax_trace)

    def __repr__(self) -> str:
        return f"TraceState(jax_trace={self._jax_trace!r})"

    def __getstate__(self) -> dict[str, object]:
        return {}

    def __setstate__(self, state: dict[str, object]) -> None:
        self._jax_trace = current_trace()


def current_jax_trace() -> object:
    """The current JAX trace's token (Flax NNX's ``tracers.current_jax_trace``; the
    same value as ``current_trace()``)."""
    return current_trace()


# A JAX pytree with no leaves, as in Flax: rebuilt in the trace that unflattens it.
jax.tree_util.register_pytree_node(TraceState, lambda s: ((), None), lambda _a, _c: TraceState())
