"""Flax NNX's ``tracers``: a record of the JAX trace an object was created in.

:class:`TraceState` is defined in :mod:`flaxgraph.tracing`; this is Flax's path to it::

  >>> import jax
  >>> from flaxgraph import tracers
  >>> outer = tracers.TraceState()
  >>> jax.jit(lambda x: x if outer.is_valid() else -x)(1.0)  # another trace inside jit
  Array(-1., dtype=float32, weak_type=True)

Source: Flax NNX 0.12.8 ``flax.nnx.tracers``."""

from __future__ import annotations

from flaxgraph.tracing import TraceState, current_jax_trace

__all__ = ["TraceState", "current_jax_trace"]
