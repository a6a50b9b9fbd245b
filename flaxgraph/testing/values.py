"""Attribute values as plain data: descriptions that build the same value again and again.

Each description is a frozen dataclass whose ``build()`` makes a new value, equal to the
last one (a value made once would be shared, and mutated, between two runs of a
differential test); ``canonical(value)`` turns a built value into comparable data::

  >>> from flaxgraph.testing.values import ArrayValue, SeqValue, canonical
  >>> d = SeqValue("list", (ArrayValue("jax", "float32", (2,), 1),))
  >>> a, b = d.build(), d.build()
  >>> a[0] is b[0], canonical(a) == canonical(b)
  (False, True)

Source: ``docs/design.md``, section "Tests".
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


class SampleColor(enum.Enum):
    """The enum whose members ``EnumValue`` builds."""

    RED = 1
    GREEN = 2


@dataclasses.dataclass(frozen=True)
class FrozenConfig:
    """A frozen (hashable) dataclass config, as models keep their hyperparameters in."""

    width: Any
    name: Any


@dataclasses.dataclass
class MutableConfig:
    """A dataclass config that is not frozen (so not hashable: ``eq`` without ``frozen``)."""

    width: Any
    name: Any


def double(x: Any) -> Any:
    """Returns ``2 * x`` (a module-level user function for ``FunctionValue``)."""
    return 2 * x


def scale_by(x: Any, factor: Any = 1) -> Any:
    """Returns ``x * factor`` (the function ``PartialValue`` binds arguments of)."""
    return x * factor


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "relu": jax.nn.relu,
    "tanh": jnp.tanh,
    "double": double,
    "scale_by": scale_by,
}
"""The functions ``FunctionValue`` names, by name."""

SCALAR_TYPES: dict[str, Any] = {
    "jnp.float32": jnp.float32,
    "jnp.bfloat16": jnp.bfloat16,
    "np.int8": np.int8,
    "np.float64": np.float64,
}
"""The scalar types ``DTypeValue(form='type')`` names, by name."""


@dataclasses.dataclass(frozen=True)
class PyScalar:
    """A Python scalar or string, kept as is (``None``, bool, int, float, complex, str)."""

    value: Any

    def build(self) -> Any:
        return self.value


@dataclasses.dataclass(frozen=True)
class NpScalar:
    """A NumPy scalar: ``np.dtype(dtype).type(value)`` (``np.float64(0.5)``, ``np.bool_(True)``)."""

    dtype: str
    value: float

    def build(self) -> Any:
        return np.dtype(self.dtype).type(self.value)


@dataclasses.dataclass(frozen=True)
class ArrayValue:
    """An array ``start + arange(size)`` of ``dtype`` (``'float32'``, ``'int32'``, ``'bool'``…)
    and ``shape``, NumPy or JAX (``kind``: ``'numpy'``, ``'jax'``); bools alternate from ``start``.
    """

    kind: str
    dtype: str
    shape: tuple[int, ...]
    start: int

    def build(self) -> Any:
        size = int(np.prod(self.shape, dtype=np.int64))
        raw = np.arange(size, dtype=np.int64) + self.start
        values = (raw % 2 == 1) if self.dtype == "bool" else raw
        array = values.astype(self.dtype).reshape(self.shape)
        return jnp.asarray(array) if self.kind == "jax" else array


@dataclasses.dataclass(frozen=True)
class KeyValue:
    """A PRNG key from ``number``: ``kind='typed'`` (``jax.random.key`` with ``impl``, ``None``
    for the default) or ``'raw'`` (``jax.random.PRNGKey``)."""

    kind: str
    impl: str | None
    number: int

    def build(self) -> Any:
        if self.kind == "raw":
            return jax.random.PRNGKey(self.number)
        return jax.random.key(self.number, impl=self.impl)


@dataclasses.dataclass(frozen=True)
class DTypeValue:
    """A dtype: ``np.dtype(name)`` (``form='dtype'``) or a scalar type of ``SCALAR_TYPES``."""

    form: str
    name: str

    def build(self) -> Any:
        return np.dtype(self.name) if self.form == "dtype" else SCALAR_TYPES[self.name]


@dataclasses.dataclass(frozen=True)
class EnumValue:
    """The member ``SampleColor[name]``."""

    name: str

    def build(self) -> Any:
        return SampleColor[self.name]


@dataclasses.dataclass(frozen=True)
class FunctionValue:
    """The function ``FUNCTIONS[name]``."""

    name: str

    def build(self) -> Any:
        return FUNCTIONS[self.name]


@dataclasses.dataclass(frozen=True)
class PartialValue:
    """``functools.partial(FUNCTIONS[name], factor=<factor built>)``."""

    name: str
    factor: Description

    def build(self) -> Any:
        return functools.partial(FUNCTIONS[self.name], factor=self.factor.build())


@dataclasses.dataclass(frozen=True)
class ConfigValue:
    """A ``FrozenConfig`` (``frozen=True``) or ``MutableConfig`` of two built fields."""

    frozen: bool
    width: Description
    name: Description

    def build(self) -> Any:
        cls = FrozenConfig if self.frozen else MutableConfig
        return cls(width=self.width.build(), name=self.name.build())


@dataclasses.dataclass(frozen=True)
class SpecValue:
    """``jax.sharding.PartitionSpec(*axes)``; an entry is a name, ``None`` or a tuple of names."""

    axes: tuple[Any, ...]

    def build(self) -> Any:
        return jax.sharding.PartitionSpec(*self.axes)


@dataclasses.dataclass(frozen=True)
class SeqValue:
    """A plain ``list`` or ``tuple`` (``kind``) of built items."""

    kind: str
    items: tuple[Description, ...]

    def build(self) -> Any:
        built = [item.build() for item in self.items]
        return built if self.kind == "list" else tuple(built)


@dataclasses.dataclass(frozen=True)
class MapValue:
    """A plain ``dict`` of string keys to built values."""

    items: tuple[tuple[str, Description], ...]

    def build(self) -> Any:
        return {key: item.build() for key, item in self.items}


Description = (
    PyScalar
    | NpScalar
    | ArrayValue
    | KeyValue
    | DTypeValue
    | EnumValue
    | FunctionValue
    | PartialValue
    | ConfigValue
    | SpecValue
    | SeqValue
    | MapValue
)
"""Any value description of this module."""

LEAF_KINDS = (ArrayValue, KeyValue)
"""Descriptions of arrays: JAX and NumPy treat these as data."""


def contains(description: Description, kinds: tuple[type, ...]) -> bool:
    """Whether ``description`` is, or holds at any depth, a description of one of ``kinds``.

    >>> from flaxgraph.testing.values import ArrayValue, PyScalar, SeqValue, contains
    >>> contains(SeqValue("tuple", (PyScalar(1), ArrayValue("jax", "int32", (), 0))), (ArrayValue,))
    True
    """
    if isinstance(description, kinds):
        return True
    if isinstance(description, SeqValue):
        return any(contains(item, kinds) for item in description.items)
    if isinstance(description, MapValue):
        return any(contains(item, kinds) for _, item in description.items)
    if isinstance(description, ConfigValue):
        return contains(description.width, kinds) or contains(description.name, kinds)
    if isinstance(description, PartialValue):
        return contains(description.factor, kinds)
    return False


def canonical(value: Any) -> Any:
    """Plain, comparable data for a built value (equal for equal values of any run).

    Arrays become ``(kind, dtype, shape, values)``, typed keys ``('key', impl, data)``,
    scalars ``(type, value)``, containers, dataclasses, partials and the like their parts,
    any other value ``('object', type name)``.

    Raises:
      jax.errors.ConcretizationTypeError: ``value`` holds a tracer.

    >>> import numpy as np
    >>> from flaxgraph.testing.values import canonical
    >>> canonical([np.float32(1.5), (1, "a")])
    ('list', (('np', 'float32', 1.5), ('tuple', (('int', 1), ('str', 'a')))))
    """
    if isinstance(value, jax.Array) and jnp.issubdtype(value.dtype, jax.dtypes.prng_key):
        return ("key", str(jax.random.key_impl(value)), _values(jax.random.key_data(value)))
    if isinstance(value, jax.Array | np.ndarray):
        kind = "numpy" if isinstance(value, np.ndarray) else "jax"
        return (kind, str(value.dtype), tuple(value.shape), _values(value))
    if isinstance(value, np.generic):
        return ("np", str(value.dtype), value.item())
    if value is None or isinstance(value, bool | int | float | complex | str):
        return (type(value).__name__, value)
    if isinstance(value, list | tuple) and type(value) in (list, tuple):
        return (type(value).__name__, tuple(canonical(v) for v in value))
    if isinstance(value, dict) and type(value) is dict:
        return ("dict", tuple(sorted((str(k), canonical(v)) for k, v in value.items())))
    return _canonical_other(value)


def _canonical_other(value: Any) -> Any:
    if isinstance(value, jax.sharding.PartitionSpec):
        return ("PartitionSpec", tuple(value))
    if isinstance(value, enum.Enum):
        return ("enum", type(value).__name__, value.name)
    if isinstance(value, np.dtype):
        return ("dtype", str(value))
    if isinstance(value, type):
        return ("type", value.__module__, value.__qualname__)
    if isinstance(value, functools.partial):
        return ("partial", canonical(value.func), canonical(value.args), canonical(value.keywords))
    if dataclasses.is_dataclass(value):
        fields = dataclasses.fields(value)
        return (type(value).__name__, tuple(canonical(getattr(value, f.name)) for f in fields))
    if callable(value) and hasattr(value, "__qualname__"):
        return ("function", getattr(value, "__module__", None), value.__qualname__)
    return ("object", type(value).__name__)


def _values(array: Any) -> Any:
    host = np.asarray(array)
    if host.dtype.kind == "V" or host.dtype == jnp.bfloat16:
        host = host.astype(np.float32)
    return host.tolist()
