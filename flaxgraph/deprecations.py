"""Flax NNX's ``deprecations``: keep an old function name working while it warns.

Source: Flax NNX 0.12.8 ``flax.nnx.deprecations.deprecated``."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["deprecated"]

F = TypeVar("F", bound=Callable[..., Any])


def deprecated(new_fn: F) -> F:
    """A deprecated alias of ``new_fn``: every call warns, then calls ``new_fn``.

    Returns a function with ``new_fn``'s name, signature and docstring (a ``.. deprecated::``
    note prepended) that emits a ``DeprecationWarning`` at its caller on every call.

    Example::

      >>> import warnings
      >>> from flaxgraph.deprecations import deprecated
      >>> old_abs = deprecated(abs)
      >>> with warnings.catch_warnings(record=True) as caught:
      ...   warnings.simplefilter('always')
      ...   old_abs(-3), caught[0].category.__name__
      (3, 'DeprecationWarning')
    """

    @functools.wraps(new_fn)
    def alias(*args: Any, **kwargs: Any) -> Any:
        warnings.warn(
            f"This function is deprecated. Use {new_fn.__qualname__} instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        return new_fn(*args, **kwargs)

    notice = f".. deprecated::\n   Use :func:`{new_fn.__qualname__}` instead.\n\n"
    alias.__doc__ = notice + (new_fn.__doc__ or "")
    return alias  # type: ignore[return-value]
