"""``cached_partial``: a transformed function with some arguments bound once.

The fast path already skips re-walking repeated arguments, so binding is all it
does (``jit_partial`` is in ``compilation.py``, where Flax keeps it).

Source: Flax NNX 0.12 ``nnx.cached_partial``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flaxgraph.transforms.transformed import Transformed, Wrapped


def cached_partial(
    f: Callable[..., Any],
    *cached_args: object,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Transformed[..., Any]:
    """A transformed function ``f`` with its first arguments bound to ``cached_args``.

    Args:
      f: a flaxgraph-transformed function (or any function).
      *cached_args: its first positional arguments (a model, an optimizer…).
      graph, graph_updates: accepted for Flax compatibility; ``f``'s own mode applies.

    Returns:
      A function of the remaining arguments, equal to ``f(*cached_args, ...)``,
      sharing ``f``'s compiled functions, plans and ``cache_info()``.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> counter = nnx.Variable(jnp.array(0))
      >>> @nnx.jit
      ... def add(c, n):
      ...   c[...] += n
      >>> add_to_counter = nnx.cached_partial(add, counter)
      >>> add_to_counter(2); add_to_counter(3); int(counter[...])
      5
    """
    del graph, graph_updates  # f's own mode applies
    return _bound(f, cached_args)


def _bound(f: Callable[..., Any], bound: tuple[Any, ...]) -> Transformed[..., Any]:
    """``f`` with ``bound`` as its first arguments (``Transformed.partial`` for a transform)."""
    if isinstance(f, Transformed):
        return f.partial(*bound)
    return Wrapped(f, f, bound)
