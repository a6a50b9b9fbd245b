"""What display shows of a value: elements and bytes per Variable kind (``Param: 6 (24 B)``;
random state is one kind, ``RngState``); arrays of at most 10 elements in full, others by shape.

Source: the output format of Flax NNX ``repr``/``nnx.display``."""

from __future__ import annotations

import types
from collections.abc import Hashable
from typing import Any

import jax
import numpy as np

from flaxgraph.graphlib.registry import (
    ARRAY,
    CONSTANT,
    DICT,
    PYTREE,
    REGISTRY,
    Kind,
    flatten_pytree,
)
from flaxgraph.rnglib.rngs import RngState
from flaxgraph.variablelib.variable import Variable

_FULL_ARRAY_MAX = 10
"""Arrays with at most this many elements are printed in full."""
INDENT = "  "
ROOT = "<root>"

Totals = dict[str, list[int]]
"""Per Variable kind name: ``[number of elements, number of bytes]``."""


# -- sizes ---------------------------------------------------------------------------------


def _size(x: Any) -> int:
    size = getattr(x, "size", None)
    return int(size) if size is not None else 0


def _nbytes(x: Any) -> int:
    dtype = getattr(x, "dtype", None)
    itemsize = getattr(dtype, "itemsize", None)  # numpy and extended (key) dtypes
    if itemsize is None:
        try:
            itemsize = np.dtype(dtype).itemsize
        except TypeError:
            return 0
    return _size(x) * int(itemsize)


def _human_bytes(n: int) -> str:
    if n < 1000:
        return f"{n} B"
    for unit, scale in (("KB", 1e3), ("MB", 1e6)):
        if n < scale * 1000:
            return f"{n / scale:.1f} {unit}"
    return f"{n / 1e9:,.1f} GB"


def variable_totals(v: Variable[Any]) -> Totals:
    """``{kind: [elements, bytes]}`` of the arrays in ``v``'s value (``{}`` if none); random
    state is one kind, ``RngState``, as in Flax NNX."""
    leaves = [v.raw_value] if kind_of(v.raw_value) is ARRAY else _array_leaves(v.raw_value)
    if not leaves:
        return {}
    kind = "RngState" if isinstance(v, RngState) else type(v).__name__
    return {kind: [sum(_size(x) for x in leaves), sum(_nbytes(x) for x in leaves)]}


def add_totals(into: Totals, totals: Totals) -> None:
    for kind, (n, b) in totals.items():
        entry = into.setdefault(kind, [0, 0])
        entry[0] += n
        entry[1] += b


def size_text(n: int, b: int) -> str:
    return f"{n:,} ({_human_bytes(b)})"


def totals_text(totals: Totals) -> str:
    """``'Param: 6 (24 B)'``; with several kinds, a ``Total`` comes last."""
    parts = [f"{kind}: {size_text(n, b)}" for kind, (n, b) in totals.items()]
    if len(totals) > 1:
        n = sum(n for n, _ in totals.values())
        b = sum(b for _, b in totals.values())
        parts.append(f"Total: {size_text(n, b)}")
    return ", ".join(parts)


# -- values ----------------------------------------------------------------------------------


def array_repr(value: Any, *, summarize: bool = False) -> str:
    """Formats an array: its own ``repr`` when concrete with at most 10 elements, else by shape.

    ``summarize=True`` shows every array by shape and dtype (a folded run's arrays). Tracers,
    ``ShapeDtypeStruct`` values and key arrays are always summarized. Never raises.

    Example::

      >>> import jax.numpy as jnp
      >>> from flaxgraph.visualization.values import array_repr
      >>> array_repr(jnp.zeros((20, 3)))
      'Array(shape=(20, 3), dtype=float32)'
      >>> array_repr(jnp.arange(3))
      'Array([0, 1, 2], dtype=int32)'
    """
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if isinstance(value, jax.core.Tracer):
        name = "Tracer"
    elif isinstance(value, jax.ShapeDtypeStruct):
        name = "ShapeDtypeStruct"
    elif isinstance(value, jax.Array):
        name = "Array"
    elif isinstance(value, np.ndarray):
        name = "np.ndarray"
    else:
        name = type(value).__name__
    summarize = (
        summarize
        or name in ("Tracer", "ShapeDtypeStruct")
        or shape is None
        or _size(value) > _FULL_ARRAY_MAX
        or jax.dtypes.issubdtype(dtype, jax.dtypes.extended)
    )
    if not summarize:
        try:
            return repr(value)
        except Exception:  # e.g. a deleted (donated) buffer
            pass
    return f"{name}(shape={tuple(shape) if shape is not None else None}, dtype={dtype})"


def safe_repr(x: Any) -> str:
    if isinstance(x, (types.FunctionType, types.BuiltinFunctionType)):
        # No memory address: the same function prints the same in every run.
        return f"<function {getattr(x, '__module__', None) or '?'}.{x.__qualname__}>"
    try:
        return repr(x)
    except Exception:
        return object.__repr__(x)


def _join_inline(open_: str, parts: list[str], close: str) -> str:
    """Joins parts on one line; continuation lines of a part stay under its start."""
    out = open_
    for i, part in enumerate(parts):
        if i:
            out += ", "
        column = len(out) - (out.rfind("\n") + 1)
        out += part.replace("\n", "\n" + " " * column)
    return out + close


def _array_leaves(x: Any) -> list[Any]:
    try:
        return [leaf for leaf in jax.tree.leaves(x) if kind_of(leaf) is ARRAY]
    except Exception:  # a registered pytree whose flatten fails: show it as a leaf
        return []


def kind_of(x: Any) -> Kind | None:
    """The engine's ``Kind`` of ``x`` (``ARRAY`` for a ``jax.ShapeDtypeStruct``, as Flax's
    display sizes it), or ``None`` for a pytree whose flatten fails."""
    if type(x) is jax.ShapeDtypeStruct:
        return ARRAY
    try:
        return REGISTRY.kind_of(x)
    except Exception:
        return None


def pytree_level(x: Any) -> list[tuple[Hashable, Any]] | None:
    """One level of a non-builtin pytree node, or ``None`` for a leaf."""
    if kind_of(x) is not PYTREE:
        return None
    try:
        return flatten_pytree(x)[0]
    except Exception:
        return None


def plain_repr(x: Any, summarize: bool = False) -> str:
    """A value holding no node or Variable, arrays through ``array_repr``."""
    kind = kind_of(x)
    if kind is ARRAY:
        return array_repr(x, summarize=summarize)
    t = type(x)
    s = summarize
    if kind is DICT:
        return _join_inline("{", [f"{k!r}: {plain_repr(v, s)}" for k, v in x.items()], "}")
    if t is list:
        return _join_inline("[", [plain_repr(v, s) for v in x], "]")
    if t is tuple:
        return _join_inline("(", [plain_repr(v, s) for v in x], ",)" if len(x) == 1 else ")")
    if kind is not CONSTANT and _array_leaves(x):
        items = pytree_level(x)
        if items:
            parts = [
                f"{k}={plain_repr(v, s)}" if isinstance(k, str) else plain_repr(v, s)
                for k, v in items
            ]
            return _join_inline(f"{t.__name__}(", parts, ")")
    return safe_repr(x)
