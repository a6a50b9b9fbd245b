"""Ref storage for Variables: JAX mutable array references (``jax.Ref``).

What it holds and why: the package README, "Ref storage and captured reads".
Source: JAX mutable array references (``jax.new_ref``, ``jax.Ref``), as Flax NNX 0.12
uses them for ``Variable(..., ref=True)``.
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
    """Whether ``value`` can be a Ref's content: a concrete array, NumPy scalar or number."""
    if isinstance(value, _Tracer):
        return False
    return isinstance(value, (jax.Array, np.ndarray, *ARRAY_SCALARS))


def new_ref(value: object) -> Any:
    """A new ``jax.Ref`` holding ``value`` (see ``can_hold``)."""
    return jax.new_ref(value)


def is_ref(value: Any) -> bool:
    """Whether ``value`` is a ``jax.Ref``, concrete or traced (faster than ``isinstance``)."""
    t = type(value)
    if t is REF_TYPE:
        return True
    return issubclass(t, _Tracer) and isinstance(value.aval, jax.ref.AbstractRef)


def describe(kind: str, ref: jax.Ref) -> str:
    """``"Param(shape=(3,), dtype=float32)"``: how messages name a Ref-backed Variable."""
    return f"{kind}(shape={tuple(ref.shape)}, dtype={ref.dtype})"


def check_fits(kind: str, ref: jax.Ref, value: Any) -> None:
    """Raises ``ValueError`` if the shape or dtype of ``value`` differs from ``ref``'s."""
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
    """``ref[index] = value``; ``captured``: the Variable belongs to an outer trace.

    Raises:
      TraceContextError (a ``ValueError``): JAX refused the write (a traced value from
        ``grad``/``vmap`` into a Ref created outside that transform).
    """
    if not captured:
        ref[index] = value
        return
    old = ref[index]
    try:
        ref[index] = value
    except Exception as error:  # JAX raises a plain Exception here
        # Under grad JAX wrote the primal before refusing the tangent: put it back.
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
# An eager `ref[...]` costs hundreds of microseconds; JAX keeps the array as `_refs._buf`.


def has_direct_content(ref: object) -> bool:
    """Whether ``ref``'s array is reachable as ``ref._refs._buf`` (for ``peek`` and ``install``)."""
    return type(ref) is REF_TYPE and hasattr(getattr(ref, "_refs", None), "_buf")


def peek(ref: Any) -> object:
    """The Ref's current array, not copied: only to hand straight to a compiled call."""
    if type(ref) is REF_TYPE:
        try:
            return ref._refs._buf
        except AttributeError:  # another JAX: the public (copying) read
            pass
    return ref[...]


def install(ref: Any, value: object) -> None:
    """Makes ``value`` (an array of the Ref's shape and dtype, held nowhere else) the content."""
    if type(ref) is REF_TYPE:
        refs_box = ref._refs
        if hasattr(refs_box, "_buf"):
            refs_box._buf = value
            return
    ref[...] = value
