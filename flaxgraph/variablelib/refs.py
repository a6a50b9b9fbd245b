"""Ref storage for Variables: JAX mutable array references (``jax.Ref``).

A Variable made with ``ref=True`` (or ``hijax=True``) keeps its value in a
``jax.Ref`` (``jax.new_ref``) instead of holding the array itself: writing
``v[...] = x`` stores ``x`` *into* the Ref, so every holder of that Ref sees the
change, and raw JAX transforms that accept Refs (``jax.jit``, ``jax.lax.scan``
bodies closing over them) carry the writes out. A Ref has a fixed shape and
dtype; it holds one array (a ``hijax=True`` Variable holding a pytree uses a box
instead, see ``boxes.py``).

This file holds what the Variable class needs to use a Ref: which values can be
put in one, the shape/dtype check before a write (so an error comes before any
write and names the Variable), and the write itself, which turns JAX's refusal
to write a traced value into a Ref the trace does not own (inside ``jax.grad``,
``jax.vmap``) into a ``TraceContextError`` that says what to do.

Source: JAX mutable array references (``jax.new_ref``, ``jax.Ref``; JAX 0.7+),
as Flax NNX 0.12 uses them for ``Variable(..., ref=True)``.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from flaxgraph.errors import TraceContextError

ARRAY_SCALARS = (bool, int, float, complex, np.generic)
"""Scalar types a Ref or a hijax box holds as they hold an array."""
REF_TYPE = jax.Ref
"""The concrete Ref class: ``type(x) is REF_TYPE`` skips its slow instance check."""
_Tracer = jax.core.Tracer


def can_hold(value: object) -> bool:
    """Whether ``value`` can become a Ref's content here: a concrete (non-traced)
    ``jax.Array``, a NumPy array or scalar, or a Python number."""
    if isinstance(value, _Tracer):
        return False
    return isinstance(value, (jax.Array, np.ndarray, *ARRAY_SCALARS))


def new_ref(value: object) -> Any:
    """A new ``jax.Ref`` holding ``value`` (see ``can_hold``)."""
    return jax.new_ref(value)


def is_ref(value: Any) -> bool:
    """Whether ``value`` is a ``jax.Ref`` (a concrete one or a traced one).

    Faster than ``isinstance(value, jax.Ref)``, whose instance check looks up the
    abstract value of every object (microseconds, on every Variable built)."""
    t = type(value)
    if t is REF_TYPE:
        return True
    return issubclass(t, _Tracer) and isinstance(value.aval, jax.ref.AbstractRef)


def describe(kind: str, ref: jax.Ref) -> str:
    """``"Param(shape=(3,), dtype=float32)"``: how messages name a Ref-backed Variable."""
    return f"{kind}(shape={tuple(ref.shape)}, dtype={ref.dtype})"


def check_fits(kind: str, ref: jax.Ref, value: Any) -> None:
    """Raises ``ValueError`` if ``value`` cannot be written into ``ref`` as a whole.

    Raises:
      ValueError: the shape or dtype of ``value`` differs from the Ref's.
    """
    shape = tuple(np.shape(value))
    dtype = jax.dtypes.result_type(value)
    if shape != tuple(ref.shape) or dtype != ref.dtype:
        raise ValueError(
            f"Cannot store a value of shape {shape} and dtype {dtype} in the Ref-backed "
            f"{describe(kind, ref)}: a jax.Ref keeps the shape and dtype it was created "
            "with.\nFix: 1. write a value of the same shape and dtype (e.g. "
            "`jnp.broadcast_to(x, v.shape).astype(v.dtype)`); 2. or keep this Variable "
            "plain (`ref=False`, or `nnx.with_vars(node, ref=False)`), whose value may "
            "change shape."
        )


def write(kind: str, ref: jax.Ref, index: object, value: object, captured: bool) -> None:
    """``ref[index] = value``; ``captured`` says the Variable belongs to an outer trace.

    Raises:
      TraceContextError (a ``ValueError``): JAX refused the write (a traced value
        from ``grad``/``vmap`` written into a Ref created outside that transform).
    """
    if not captured:
        ref[index] = value
        return
    old = ref[index]
    try:
        ref[index] = value
    except Exception as error:  # JAX raises a plain Exception here
        # Under grad JAX has already written the primal value when it refuses the
        # tangent: put the old content back so that nothing is half-updated.
        try:
            ref[index] = old
        except Exception:  # under vmap nothing was written
            pass
        raise TraceContextError(
            f"Cannot write into the Ref-backed {describe(kind, ref)} from inside this "
            "transform: it was created outside and captured by closure, and JAX only lets "
            "a Ref captured this way be written under jit or scan, not with a value that "
            f"is differentiated or vmapped ({error}).\nFix: pass the object that holds "
            "it as an argument of the transformed function (e.g. `nnx.vmap(f)(model, x)` "
            "instead of using `model` from the enclosing scope)."
        ) from error


# -- the transforms' fast path ------------------------------------------------------------
# A Ref's content read or written with `ref[...]` outside any trace is one eagerly
# dispatched JAX operation each (hundreds of microseconds). A transform's fast path
# only needs the current array, to pass it straight to a compiled call, and to
# replace it by an array the compiled call produced for it alone: JAX keeps that
# array as the Ref's `_refs._buf` (its compiled calls update it the same way). These
# two functions use it where this JAX has it; elsewhere they fall back to `ref[...]`.


def has_direct_content(ref: object) -> bool:
    """Whether ``ref``'s array is reachable as ``ref._refs._buf`` (what ``peek`` and
    ``install`` use when it is)."""
    return type(ref) is REF_TYPE and hasattr(getattr(ref, "_refs", None), "_buf")


def peek(ref: Any) -> object:
    """The Ref's current array, not copied: only to hand straight to a compiled call
    (the array is the Ref's own and changes when the Ref is written)."""
    if type(ref) is REF_TYPE:
        try:
            return ref._refs._buf
        except AttributeError:  # another JAX: the public (copying) read
            pass
    return ref[...]


def install(ref: Any, value: object) -> None:
    """Makes ``value`` (an array of the Ref's shape and dtype that nothing else holds,
    e.g. an output of a compiled call written nowhere else) the Ref's content."""
    if type(ref) is REF_TYPE:
        refs_box = ref._refs
        if hasattr(refs_box, "_buf"):
            refs_box._buf = value
            return
    ref[...] = value
