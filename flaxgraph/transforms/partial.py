"""``cached_partial`` (and ``jit_partial``, kept in ``compilation.py`` where Flax keeps it): a
transformed function with some arguments bound once (a model and its optimizer, typically).

In Flax NNX these exist to skip re-walking the bound objects on every call. In
flaxgraph every transform already keeps a fast-path plan per argument structure
(``fastpath.py``): calling ``step(model, optimizer, x, y)`` again and again checks
the structure snapshot of ``model`` and ``optimizer`` and reads their leaves without
a graph walk. So binding is all these functions need to do; what they return still
takes the fast path, writes every update back to the bound objects, and reports
``cache_info()``. Unlike Flax's ``cached_partial``, a call that changes the bound
objects' structure is not an error: the next call simply plans again.

Source: Flax NNX 0.12 ``nnx.jit_partial`` and ``nnx.cached_partial``.
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
    """A transformed function ``f`` (``nnx.jit``, ``nnx.vmap``…) with its first
    arguments bound to ``cached_args``.

    Args:
      f: a flaxgraph-transformed function (or any function).
      *cached_args: its first positional arguments (objects: model, optimizer…).
      graph, graph_updates: accepted for Flax compatibility; the mode that applies
        is the one ``f`` was created with.

    Returns:
      A function of the remaining arguments, equal to ``f(*cached_args, ...)``. The
      bound objects' traversal is cached by ``f``'s own fast path (see the module
      docstring); ``.cache_info()`` is ``f``'s when it has one.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> counter = nnx.Variable(jnp.array(0))
      >>> @nnx.jit
      ... def add(c, n):
      ...   c[...] += n
      >>> add_to_counter = nnx.cached_partial(add, counter)
      >>> add_to_counter(2); add_to_counter(3); int(counter[...])
      5

    Source: Flax NNX 0.12 ``nnx.cached_partial``.
    """
    del graph, graph_updates  # f's own mode applies
    return _bound(f, cached_args)


def _bound(f: Callable[..., Any], bound: tuple[Any, ...]) -> Transformed[..., Any]:
    """``f`` with ``bound`` as its first arguments: for a transformed function, a
    copy sharing its compiled functions and plans (``Transformed.partial``)."""
    if isinstance(f, Transformed):
        return f.partial(*bound)
    return Wrapped(f, f, bound)
