"""Which captured Variables a compiled function read while it was traced (``watching``).

Why and what it costs: the package README, "Ref storage and captured reads".
Source: issue 24 (item 4); ``jax.jit`` treats closed-over arrays as constants (JAX's
"Sharp bits").
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import jax


class _Watches(threading.local):
    """This thread's stack of active watches (lists of read Variables)."""

    def __init__(self) -> None:
        self.stack: list[list[Any]] = []


_WATCHES = _Watches()


@contextmanager
def watching() -> Iterator[list[Any]]:
    """Records into the yielded list, once each, the concrete Variables of another trace read."""
    found: list[Any] = []
    _WATCHES.stack.append(found)
    try:
        yield found
    finally:
        _WATCHES.stack.pop()


def note_read(var: Any) -> None:
    """Called by a Variable read from another trace than the one it was made in."""
    stack = _WATCHES.stack
    if not stack:
        return
    if var._var_ref is not None:
        return  # a Ref (or box) is state JAX threads through, not a constant
    if isinstance(var._var_raw, jax.core.Tracer):
        return  # an input of an enclosing transform: nothing is baked in
    found = stack[-1]
    if not any(v is var for v in found):
        found.append(var)
