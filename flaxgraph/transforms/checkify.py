"""``checkify`` over functions of objects: functional error checks that may update state.

``jax.experimental.checkify`` turns the checks inside a function
(``checkify.check``, and with ``errors=`` also NaN, division and index checks)
into an ``Error`` value returned next to the output, so that they work under
``jit``. ``nnx.checkify(f)`` does this for functions of objects: ``f`` may read
and update the objects among its arguments, and the updates reach the caller's
objects as with every flaxgraph transform (the error does not undo them).

  >>> import jax.numpy as jnp, flaxgraph as nnx
  >>> from jax.experimental import checkify
  >>> class Counter(nnx.Module):
  ...   def __init__(self): self.n = nnx.BatchStat(jnp.array(0))
  >>> def step(c, x):
  ...   checkify.check(x > 0, 'x must be positive, got {}', x)
  ...   c.n.value += 1
  ...   return x * 2
  >>> c = Counter()
  >>> err, out = nnx.checkify(step)(c, jnp.array(-1.0))
  >>> print(err.get()), int(c.n.value)
  x must be positive, got -1.0 (`check` failed)
  (None, 1)

Source: Flax NNX 0.12 ``nnx.checkify``; ``jax.experimental.checkify.checkify``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from jax.experimental import checkify as checkify_lib

from flaxgraph.modes import resolve
from flaxgraph.transforms.calling_conventions import unbind
from flaxgraph.transforms.transformed import Wrapped
from flaxgraph.transforms.unprefixed import LiftedCall


def checkify(
    f: Callable[..., Any],
    errors: frozenset[Any] = checkify_lib.user_checks,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Callable[..., tuple[Any, Any]]:
    """Returns ``g(*args, **kwargs) -> (error, output)``: ``f`` with its checks made functional.

    Args:
      f: a function of objects and arrays (a Module instance is accepted; a bound
        method of one raises ``ValueError``, as in Flax NNX 0.12).
      errors: the checks to enable (a frozenset of error kinds); default
        ``checkify.user_checks`` (only explicit ``checkify.check`` calls), as in
        Flax NNX 0.12.8 and JAX. E.g. ``checkify.float_checks`` adds NaN checks.
      graph: ``False`` for tree mode (``None``: ``nnx.set_graph_mode``'s default).
      graph_updates: ``False``: only Variable values come back, not structural
        changes (``None``: ``nnx.set_graph_updates``'s default).

    Returns:
      ``g`` returning ``(checkify.Error, output)``. Call ``error.throw()`` to raise
      a failed check outside ``jit``; ``error.get()`` is its message or ``None``.

    Raises:
      TraceContextError (``ValueError``): ``f`` returns or stores an object it
        captured by closure (as in every transform).

    Example::

      >>> import jax, jax.numpy as jnp, flaxgraph as nnx
      >>> from jax.experimental import checkify
      >>> err, out = nnx.checkify(jnp.log, errors=checkify.float_checks)(-1.0)
      >>> err.get() is not None
      True

    Source: Flax NNX 0.12 ``nnx.checkify``.
    """
    mode = resolve(graph, graph_updates)
    inner_f, bound = unbind(f, "checkify")
    lifted = LiftedCall(inner_f, mode)
    checked = checkify_lib.checkify(lifted.pure, errors=errors)

    @functools.wraps(inner_f)
    def wrapper(*args: object, **kwargs: object) -> tuple[Any, Any]:
        call, static, groups = lifted.split(args, kwargs)
        error, out = checked(static, groups)
        return error, LiftedCall.finish(call, out)

    return Wrapped(inner_f, wrapper, bound)
