"""Which JAX trace is active: the token Objects and Variables record at creation.

An object created outside a transform must not be mutated inside it (the new
value would be a tracer that leaks out). Each Object and Variable records the
trace that was active when it was created; a mutation compares that record with
the current trace. JAX exposes the current trace only through
``jax._src.core.get_opaque_trace_state``; this file is the one place that
touches it.
"""

from __future__ import annotations

from jax._src import core as _jax_core


def current_trace() -> object:
    """Returns an opaque token for the active JAX trace; equal tokens, same trace."""
    return _jax_core.get_opaque_trace_state(convention="flax")
