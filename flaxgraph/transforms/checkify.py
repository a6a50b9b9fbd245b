"""``checkify`` over functions of objects: functional error checks that may update state.

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
      f: a function of objects and arrays (or a Module instance; a bound method of
        one raises ``ValueError``).
      errors: the checks to enable; default ``checkify.user_checks`` (explicit
        ``checkify.check`` calls only); e.g. ``checkify.float_checks`` adds NaN checks.
      graph: ``False`` for tree mode (``None``: ``nnx.set_graph_mode``'s default).
      graph_updates: ``False``: only Variable values come back (``None``: the default).

    Returns:
      ``g`` returning ``(checkify.Error, output)`` (``error.get()``: the message or
      ``None``); updates to the argument objects reach the caller's even on failure.

    Raises:
      TraceContextError (``ValueError``): ``f`` returns or stores a captured object.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> from jax.experimental import checkify
      >>> def f(x):
      ...   checkify.check(x > 0, 'x must be positive, got {}', x)
      ...   return x * 2
      >>> err, out = nnx.checkify(f)(jnp.array(-1.0))
      >>> print(err.get())
      x must be positive, got -1.0 (`check` failed)
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
