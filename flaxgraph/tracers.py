"""Flax NNX's ``tracers``: a record of the JAX trace an object was created in.

A :class:`TraceState` taken when an object is built says, later, whether code still runs in
that same trace (:meth:`TraceState.is_valid`); outside every transform that is the top-level
(eager) trace, inside ``jax.jit``/``nnx.jit`` the transform's. The class is defined in
:mod:`flaxgraph.tracing` (flaxgraph's Objects and Variables expose it as Flax's do, as
``Variable._trace_state``); this module is Flax's path to it.

Example::

  >>> import jax
  >>> from flaxgraph import tracers
  >>> outer = tracers.TraceState()
  >>> outer.is_valid()
  True
  >>> jax.jit(lambda x: x if outer.is_valid() else -x)(1.0)  # another trace inside jit
  Array(-1., dtype=float32, weak_type=True)

Source: Flax NNX 0.12.8 ``flax.nnx.tracers`` (its module map).
"""

from __future__ import annotations

from flaxgraph.tracing import TraceState, current_jax_trace

__all__ = ["TraceState", "current_jax_trace"]
