"""``jit_partial`` and ``cached_partial``: a transformed function with some arguments
bound once (a model and its optimizer, typically).

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

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from flaxgraph.graphlib.walk import flatten_with_paths
from flaxgraph.modes import resolve
from flaxgraph.transforms.compilation import UNSPECIFIED, jit
from flaxgraph.transforms.transformed import Transformed, Wrapped


def jit_partial(
    fun: Callable[..., Any],
    *partial_args: Any,
    in_shardings: Any = UNSPECIFIED,
    out_shardings: Any = UNSPECIFIED,
    static_argnums: int | Sequence[int] | None = None,
    static_argnames: str | Iterable[str] | None = None,
    donate_argnums: int | Sequence[int] | None = None,
    donate_argnames: str | Iterable[str] | None = None,
    keep_unused: bool = False,
    device: Any = None,
    backend: str | None = None,
    inline: bool = False,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Transformed[..., Any]:
    """``nnx.jit(fun)`` with its first positional arguments bound to ``partial_args``.

    Args:
      fun: the function to compile; ``partial_args`` are its first positional
        arguments.
      *partial_args: the arguments to bind (objects: a model, an optimizer…). Their
        Variables may change value between calls without recompiling, and every
        update ``fun`` makes to them is written back after each call.
      in_shardings, out_shardings, static_argnums, static_argnames, donate_argnums,
        donate_argnames, keep_unused, device, backend, inline, graph, graph_updates:
        as in ``nnx.jit``; positions count ``fun``'s arguments, bound ones included
        (a tuple of ``in_shardings`` starts with the bound arguments' entries).

    Returns:
      A function of the remaining arguments; ``.cache_info()`` as ``nnx.jit``'s.

    Raises:
      SharedReferenceError (``ValueError``): in tree mode, a Variable is reachable
        twice among ``partial_args`` (raised here, naming the paths).
      As ``nnx.jit`` (at the first call for errors about the other arguments).

    Example::

      >>> import jax.numpy as jnp, optax, flaxgraph as nnx
      >>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
      >>> optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
      >>> def train_step(model, optimizer, x, y):
      ...   loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
      ...   optimizer.update(model, grads)
      ...   return loss
      >>> step = nnx.jit_partial(train_step, model, optimizer, graph=False)
      >>> losses = [float(step(jnp.ones((4, 2)), jnp.zeros((4, 3)))) for _ in range(3)]
      >>> losses[0] > losses[1] > losses[2], step.cache_info().general_calls
      (True, 1)

    Source: Flax NNX 0.12 ``nnx.jit_partial``.
    """
    if not resolve(graph, graph_updates).graph:
        # Tree mode: a Variable shared among the bound objects is an error now, not
        # at the first call (as Flax NNX 0.12).
        flatten_with_paths(partial_args, root_name="args", graph=False)
    jitted = jit(
        fun,
        in_shardings=in_shardings,
        out_shardings=out_shardings,
        static_argnums=static_argnums,
        static_argnames=static_argnames,
        donate_argnums=donate_argnums,
        donate_argnames=donate_argnames,
        keep_unused=keep_unused,
        device=device,
        backend=backend,
        inline=inline,
        graph=graph,
        graph_updates=graph_updates,
    )
    return _bound(jitted, partial_args)


def cached_partial(
    f: Callable[..., Any],
    *cached_args: Any,
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
