"""Which captured Variables a compiled function read while it was traced.

``f = nnx.jit(lambda x: model(x))`` reads ``model``'s weights by closure: JAX bakes
their current values into the compiled code as constants, so after
``model.linear.kernel[...] = 0`` the cached ``f(x)`` still returns the old result
(Flax says nothing). ``nnx.jit`` (and ``nnx.pmap``, and ``nnx.scan``, which runs
compiled) traces the user's function inside ``watching()``; a Variable read
whose trace is not the current one calls ``note_read``, which records it when a
watch is active and its value is a concrete array (not a tracer: a Variable of an
enclosing transform's trace is an input there, so nothing is baked in). The
transform then warns once (``transforms/closure_reads.py``).

Cost: a Variable read compares its creation trace with the current one
(``Variable._check_read``, one identity test); only a mismatch (a read from
another trace) reaches this module. Repeated calls of a compiled function do not
trace, so they do not read at all.

Source: issue 24 (item 4); ``jax.jit``'s treatment of closed-over arrays as
constants (JAX's "Sharp bits": pure functions and closures).
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
    """Records, into the yielded list (each once, in read order), the Variables of
    another trace holding concrete arrays that are read while the block runs."""
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
    if isinstance(var.raw_value, jax.core.Tracer):
        return  # an input of an enclosing transform: nothing is baked in
    found = stack[-1]
    if not any(v is var for v in found):
        found.append(var)
