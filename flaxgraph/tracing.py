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
