"""What a Variable does *as its value*: the array protocol and Python operators.

``ValueOps`` is the base class of ``Variable`` that makes a Variable usable
where its value is: ``x @ layer.kernel + layer.bias``, ``jnp.asarray(v)``,
``v[0]``, ``len(v)``, ``float(v)``, comparisons. Binary operators compute on the
value and return a plain value; in-place operators (``v += 1``, ``v[...] += x``)
write the result back with ``set_value`` and return the *same* Variable, so
every reference to it sees the change (and a Ref-backed Variable's Ref is
updated). Subclasses provide ``raw_value`` (the value) and ``set_value``.

  >>> import jax.numpy as jnp, flaxgraph as nnx
  >>> v = nnx.Param(jnp.array([1.0, 2.0]))
  >>> (v * 2).tolist(), float(v[1])
  ([2.0, 4.0], 2.0)
  >>> w = v
  >>> w += 1
  >>> w is v, v[...].tolist()
  (True, [2.0, 3.0])

Source: Flax NNX 0.12 ``nnx.Variable`` (it behaves as its value); in-place
operators as in Flax NNX's "Transformations" guide.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from flaxgraph.variablelib.refs import is_ref


class ValueOps:
    """Array protocol and operators over ``self.raw_value`` (see the module docstring).

    Subclasses must provide ``raw_value`` and ``set_value(value, *, index=...)``.
    """

    __slots__ = ()
    raw_value: Any

    def set_value(self, value: Any, **kwargs: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _read_value(self) -> Any:
        """The value, for a read by user code (``Variable`` also notes a read from
        another trace: ``variablelib/closure_watch.py``)."""
        return self.raw_value

    def __jax_array__(self) -> Any:
        return self._read_value()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(self._read_value(), dtype=dtype)

    def __getitem__(self, key: Any) -> Any:
        # Through get_value, so a subclass that overrides it is honoured (Flax 0.12).
        return self.get_value(index=key)  # type: ignore[attr-defined]

    def __setitem__(self, key: Any, value: Any) -> None:
        storage = getattr(self, "_var_ref", None)
        if key is Ellipsis and storage is not None:
            # A hijax Variable takes any value of the same dtype kind in Flax; here its
            # Ref keeps its shape, so a value that broadcasts fills it (NumPy's a[...] = x).
            # (A box, holding a pytree, takes the new value as it is.)
            if getattr(self, "hijax", False) and is_ref(storage) and _fills_array(self, value):
                value = jnp.broadcast_to(value, storage.shape).astype(storage.dtype)
            self.set_value(value)
        elif key is Ellipsis and not _fills_array(self, value):
            self.set_value(value)
        else:
            # ``v[...] = 2`` on an array writes into the array (shape and dtype kept),
            # as in Flax 0.12.
            self.set_value(value, index=key)

    def __delitem__(self, key: Any) -> None:
        # ``del v[key]`` on a dict/list value: the value without the entry is written
        # back with set_value (a box-backed Variable's box gets the smaller pytree).
        value = self.get_value()  # type: ignore[attr-defined]
        if type(value) in (dict, list):  # a new container (see variable._updated)
            value = type(value)(value)
        del value[key]
        self.set_value(value)

    def __contains__(self, item: Any) -> bool:
        return item in self.raw_value

    def __len__(self) -> int:
        return len(self.raw_value)  # type: ignore[arg-type]

    def __iter__(self) -> Any:
        return iter(self.raw_value)  # type: ignore[call-overload]

    def __bool__(self) -> bool:
        return bool(self.raw_value)

    def __int__(self) -> int:
        return int(self.raw_value)  # type: ignore[call-overload]

    def __float__(self) -> float:
        return float(self.raw_value)  # type: ignore[arg-type]

    def __index__(self) -> int:
        return operator.index(self.raw_value)  # type: ignore[arg-type]

    def __complex__(self) -> complex:
        return complex(self.raw_value)  # type: ignore[arg-type]


def _make_binary(op: Callable[[Any, Any], Any]) -> tuple[Callable[..., Any], ...]:
    def forward(self: ValueOps, other: Any) -> Any:
        if isinstance(other, ValueOps):
            other = other._read_value()
        return op(self._read_value(), other)

    def reflected(self: ValueOps, other: Any) -> Any:
        return op(other, self._read_value())

    def inplace(self: ValueOps, other: Any) -> ValueOps:
        if isinstance(other, ValueOps):
            other = other.raw_value
        self.set_value(op(self.raw_value, other))
        return self

    return forward, reflected, inplace


for _name, _op in [
    ("add", operator.add),
    ("sub", operator.sub),
    ("mul", operator.mul),
    ("matmul", operator.matmul),
    ("truediv", operator.truediv),
    ("floordiv", operator.floordiv),
    ("mod", operator.mod),
    ("pow", operator.pow),
    ("and", operator.and_),
    ("or", operator.or_),
    ("xor", operator.xor),
    ("lshift", operator.lshift),
    ("rshift", operator.rshift),
]:
    _fwd, _refl, _inpl = _make_binary(_op)
    setattr(ValueOps, f"__{_name}__", _fwd)
    setattr(ValueOps, f"__r{_name}__", _refl)
    setattr(ValueOps, f"__i{_name}__", _inpl)

for _name, _op in [
    ("lt", operator.lt),
    ("le", operator.le),
    ("gt", operator.gt),
    ("ge", operator.ge),
    ("eq", operator.eq),
    ("ne", operator.ne),
    ("divmod", divmod),
]:
    setattr(ValueOps, f"__{_name}__", _make_binary(_op)[0])
ValueOps.__rdivmod__ = _make_binary(divmod)[1]  # type: ignore[attr-defined]
ValueOps.__hash__ = object.__hash__  # type: ignore[method-assign]  # restored after __eq__

for _name, _op in [
    ("neg", operator.neg),
    ("pos", operator.pos),
    ("abs", operator.abs),
    ("invert", operator.invert),
]:
    setattr(ValueOps, f"__{_name}__", (lambda op: lambda self: op(self._read_value()))(_op))


def _fills_array(v: Any, value: Any) -> bool:
    """Whether ``v[...] = value`` writes into the Variable's array (broadcast, shape
    and dtype kept, as NumPy's ``a[...] = x``) instead of replacing the value: a plain
    Variable holding a JAX array and a ``value`` that is no array, or a Ref-backed
    Variable and a ``value`` of another shape that broadcasts to the Ref's (a
    ``jax.Ref`` keeps its shape: ``v[...] = 10`` fills a Ref of shape ``(1,)``; the
    caller applies this to hijax Variables only)."""
    ref = getattr(v, "_var_ref", None)
    if ref is None:
        return isinstance(v.raw_value, jax.Array) and not hasattr(value, "shape")
    shape = tuple(np.shape(value)) if not isinstance(value, (dict, list, tuple)) else None
    if shape is None or shape == tuple(ref.shape):
        return False
    try:
        return np.broadcast_shapes(shape, tuple(ref.shape)) == tuple(ref.shape)
    except ValueError:
        return False
