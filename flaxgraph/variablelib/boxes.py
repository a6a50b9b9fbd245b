"""Box storage for hijax Variables whose value is a pytree (a dict, a list…).

Why a box and the JAX 0.10 faults worked around here: the package README, "Box
storage". Source: JAX's hijax box (``jax._src.hijax.Box``, JAX 0.10), as Flax NNX 0.12
uses it for hijax Variables holding pytrees (the "Hijax" guide).

>>> import jax, jax.numpy as jnp
>>> from flaxgraph.variablelib import boxes
>>> b = boxes.new_box({'a': jnp.array(0)})
>>> jax.jit(lambda b: b.set({**b.get(), 's': jnp.ones(2).sum()}))(b)
>>> sorted(boxes.read(b))
['a', 's']
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from flaxgraph.errors import TraceContextError
from flaxgraph.tracing import is_top_level
from flaxgraph.variablelib.refs import ARRAY_SCALARS

_Box: Any  # None when the installed JAX lacks them
_BoxTy: Any
_BoxTypeState: Any
_Literal: object
try:  # private in JAX 0.10: feature-detected, see the module docstring
    from jax._src.hijax import Box as _Box
    from jax._src.hijax import BoxTy as _BoxTy
    from jax._src.hijax import BoxTypeState as _BoxTypeState
except ImportError:  # pragma: no cover - depends on the installed JAX
    _Box = None
    _BoxTy = None
    _BoxTypeState = None
try:
    from jax._src.core import Literal as _Literal
except ImportError:  # pragma: no cover - depends on the installed JAX
    _Literal = None

AVAILABLE: bool = _Box is not None and _BoxTy is not None
"""Whether this JAX has the box type (fixed at import; not a setting)."""

BOX_TYPE: type | None = _Box if AVAILABLE else None
"""The concrete box class (``None`` without it), for ``type(x) is BOX_TYPE`` checks."""

UNAVAILABLE_REASON = (
    "this JAX has no mutable box type (jax._src.hijax.Box, JAX 0.10), which a hijax "
    "Variable needs to hold a pytree value"
)

_Tracer = jax.core.Tracer


def is_box(value: object) -> bool:
    """Whether ``value`` is a box, concrete or traced (one type check for non-tracers)."""
    if not AVAILABLE:
        return False
    t = type(value)
    if t is _Box:
        return True
    return issubclass(t, _Tracer) and isinstance(getattr(value, "aval", None), _BoxTy)


def fits(value: object) -> bool:
    """Whether a hijax Variable keeps ``value`` in a box: a container pytree of arrays, ``{}``."""
    if not AVAILABLE or value is None or isinstance(value, (jax.Array, np.ndarray, *ARRAY_SCALARS)):
        return False
    treedef: object  # a PyTreeDef (jaxlib ships no stub for it)
    leaves, treedef = jax.tree_util.tree_flatten(value)
    if treedef.num_nodes == 1 and treedef.num_leaves == 1:
        return False  # the value is a leaf itself (a string, an object…)
    return all(isinstance(x, (jax.Array, np.ndarray, *ARRAY_SCALARS)) for x in leaves)


def can_hold(value: object) -> bool:
    """Whether a concrete box can be made for ``value`` now: it ``fits`` and holds no tracer."""
    return fits(value) and not any(isinstance(x, _Tracer) for x in jax.tree_util.tree_leaves(value))


def new_box(value: object) -> Any:
    """A new box holding ``value``; Python and NumPy numbers become JAX arrays."""
    assert _Box is not None
    return _Box(jax.tree_util.tree_map(_as_array, value))


def _as_array(x: object) -> object:
    return x if isinstance(x, jax.Array) else jnp.asarray(x)


def _traced(x: object) -> object:
    # JAX 0.10 loses a constant (or a literal's tracer) written into a box in a trace:
    # an identity operation makes it a value the trace computes.
    if isinstance(x, _Tracer) and (
        _Literal is None or type(getattr(x, "val", None)) is not _Literal
    ):
        return x
    return jax.lax.optimization_barrier(x)  # type: ignore[no-untyped-call]


def read(box: Any) -> Any:
    """The box's content, a fresh container each call (write with ``write``)."""
    return box.get()


def describe(kind: str, box: Any) -> str:
    """``"Variable(box of dict)"``: how messages name a box-backed Variable."""
    try:
        content = type(box.get()).__name__
    except Exception:  # a box JAX will not read here
        content = "pytree"
    return f"{kind}(box of {content})"


def no_storage_message(kind: str, value: object, hijax: bool) -> str:
    """Why ``Variable(value, ref=True/hijax=True)`` cannot store ``value``, and the fix."""
    what = type(value).__name__
    if hijax and not AVAILABLE and value is not None and not isinstance(value, str):
        return (
            f"{kind}(..., hijax=True) cannot hold a {what}: {UNAVAILABLE_REASON}; "
            "a jax.Ref holds one array only.\nFix: use a JAX version with the hijax box "
            "(0.10), pass an array, or leave hijax False for this Variable."
        )
    return (
        f"{kind}(..., ref=True/hijax=True) needs an array or a number to put in a "
        f"jax.Ref (or, with hijax=True, a dict/list/pytree of arrays to put in a box), "
        f"got a {what}.\nFix: pass an array (or a pytree of arrays with hijax=True), "
        "or leave ref/hijax False for this Variable."
    )


def _set(box: Any, value: object) -> None:
    """``box.set(value)``, fixing the traced box's structure record if JAX 0.10 left it stale.

    JAX caches the abstract ``set``: structures A, B, then A again leave the record at B.
    """
    box.set(value)
    record = getattr(box, "mutable_qdd", None)  # only on a box traced as an argument
    if record is None or _BoxTypeState is None:
        return
    leaves, treedef = jax.tree_util.tree_flatten(value)
    state = _BoxTypeState(tuple(jax.typeof(x) for x in leaves), treedef)
    if record.cur_val != state:
        record.update(state)


def write(kind: str, box: Any, value: object, captured: bool) -> None:
    """Replaces the box's content by ``value``; ``captured``: the Variable is of an outer trace.

    Raises:
      TraceContextError (a ``ValueError``): JAX refused the write (under ``grad``/``vmap``
        into a box created outside that transform).
      TypeError: ``value`` holds something that is not a JAX value (a string…).
    """
    value = jax.tree_util.tree_map(_as_array, value)
    if not is_top_level():
        value = jax.tree_util.tree_map(_traced, value)
    if not captured:
        _set(box, value)
        return
    old = box.get()
    try:
        _set(box, value)
    except TypeError:
        raise
    except Exception as error:  # JAX raises a plain Exception/NotImplementedError here
        try:  # under grad JAX may have written the primal before refusing the tangent
            box.set(old)
        except Exception:
            pass
        raise TraceContextError(
            f"Cannot write into the hijax {describe(kind, box)} from inside this "
            "transform: it was created outside and captured by closure, and JAX only lets "
            "a box captured this way be written under jit or scan, not with a value that "
            f"is differentiated or vmapped ({type(error).__name__}: {error}).\nFix: pass "
            "the object that holds it as an argument of the transformed function (e.g. "
            "`nnx.vmap(f)(model, x)` instead of using `model` from the enclosing scope)."
        ) from error
