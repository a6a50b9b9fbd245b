"""Data and static attributes: the ``nnx.data``/``nnx.static`` marks and the data types.

The rule: the package README, "Data or static". Source: Flax NNX 0.12 ``nnx.data``,
``static``, ``Data``, ``Static``, ``is_data``, ``has_data``, ``register_data_type``.
"""

from __future__ import annotations

import dataclasses
import re
import typing
import warnings
from typing import Annotated, Any, NamedTuple, TypeVar

import jax

from flaxgraph.graphlib.registry import ARRAY, NODE, REGISTRY, VARIABLE

DATA = "data"
STATIC = "static"
_KIND_KEY = "flaxgraph_attribute_kind"  # dataclass field metadata key
T = TypeVar("T")


class Marked:
    __slots__ = ("value", "kind")

    def __init__(self, value: Any, kind: str):
        self.value = value
        self.kind = kind


class _NoValue:
    def __repr__(self) -> str:
        return "<no value>"


_NO_VALUE: Any = _NoValue()


def _mark(kind: str, value: Any, kwargs: dict[str, Any]) -> Any:
    if value is not _NO_VALUE:
        if kwargs:
            raise TypeError(
                f"nnx.{kind}(value, ...) takes no keyword arguments; the keyword form "
                f"nnx.{kind}(default=...) (no value) declares a dataclass field."
            )
        return Marked(value, kind)
    metadata = {**kwargs.pop("metadata", None or {}), _KIND_KEY: kind}
    return dataclasses.field(metadata=metadata, **kwargs)


def data(value: Any = _NO_VALUE, /, **kwargs: Any) -> Any:
    """Marks an attribute as data: a pytree child and a State leaf even if it is not an array.

    On assignment (``self.step = nnx.data(0)``) it returns a mark the assignment unwraps;
    without a value (``step: int = nnx.data(default=0)``) a ``dataclasses.field`` taking
    the keyword arguments. A marked container is still walked in the graph view.

    Raises:
      TypeError: a value and keyword arguments together.

    >>> import jax, flaxgraph as nnx
    >>> class Foo(nnx.Pytree):
    ...   def __init__(self):
    ...     self.count = nnx.data(42); self.name = 'foo'
    >>> jax.tree.leaves(Foo())
    [42]
    """
    return _mark(DATA, value, kwargs)


def static(value: Any = _NO_VALUE, /, **kwargs: Any) -> Any:
    """Marks an attribute as static (pytree aux data and GraphDef, so hashable); used as ``data``.

    Raises:
      TypeError: a value and keyword arguments together.

    >>> import jax, jax.numpy as jnp, flaxgraph as nnx
    >>> @nnx.dataclass
    ... class Conf(nnx.Pytree):
    ...   w: jax.Array
    ...   n: int = nnx.static(default=3)
    >>> jax.tree.leaves(Conf(jnp.ones(1)))
    [Array([1.], dtype=float32)]
    """
    return _mark(STATIC, value, kwargs)


class _AnnotationMarker:
    __slots__ = ("kind",)

    def __init__(self, kind: str):
        self.kind = kind

    def __repr__(self) -> str:
        return f"nnx.{self.kind}"


DataAnnotation = "__data__"
"""Flax's marker string: ``typing.Annotated[T, DataAnnotation]`` declares data."""
StaticAnnotation = "__static__"
"""Flax's marker string: ``typing.Annotated[T, StaticAnnotation]`` declares static."""
FLAX_ANNOTATIONS = {DataAnnotation: DATA, StaticAnnotation: STATIC}

_DATA_MARKER = _AnnotationMarker(DATA)
_STATIC_MARKER = _AnnotationMarker(STATIC)


def _deprecated(name: str) -> None:
    warnings.warn(
        f"nnx.{name}[T] is deprecated: write `field: T = nnx.{name.lower()}()` instead "
        f"(nnx.{name.lower()} is also a dataclass field specifier).",
        DeprecationWarning,
        stacklevel=3,
    )


class Data:
    """``x: nnx.Data[T]`` marks a class attribute as data; deprecated for ``x: T = nnx.data()``.

    >>> import warnings, jax, flaxgraph as nnx
    >>> with warnings.catch_warnings(record=True) as caught:
    ...   warnings.simplefilter('always')
    ...   class Foo(nnx.Pytree):
    ...     n: nnx.Data[int]
    ...     def __init__(self):
    ...       self.n = 3
    >>> jax.tree.leaves(Foo()), caught[0].category.__name__
    ([3], 'DeprecationWarning')
    """

    def __class_getitem__(cls, item: Any) -> Any:
        _deprecated("Data")
        return Annotated[item, _DATA_MARKER]


class Static:
    """``x: nnx.Static[T]`` marks a class attribute static; deprecated for ``nnx.static()``."""

    def __class_getitem__(cls, item: Any) -> Any:
        _deprecated("Static")
        return Annotated[item, _STATIC_MARKER]


_STRING_MARK = re.compile(r"(?:^|[\s\[.,])(Data|Static)\[")


def class_kinds(cls: type) -> tuple[tuple[str, str], ...]:
    """The ``(name, kind)`` pairs a class declares (fields and annotations), base classes first."""
    kinds: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        for name, ann in vars(klass).get("__annotations__", {}).items():
            if isinstance(ann, str):  # `from __future__ import annotations`
                match = _STRING_MARK.search(ann)
                if match and klass is cls:
                    _deprecated(match.group(1))
                if match:
                    kinds[name] = DATA if match.group(1) == "Data" else STATIC
            elif typing.get_origin(ann) is Annotated:
                for marker in ann.__metadata__:
                    if isinstance(marker, _AnnotationMarker):
                        kinds[name] = marker.kind
                    elif marker in FLAX_ANNOTATIONS:  # typing.Annotated[T, DataAnnotation]
                        kinds[name] = FLAX_ANNOTATIONS[marker]
        for name, value in vars(klass).items():
            if isinstance(value, dataclasses.Field) and _KIND_KEY in value.metadata:
                kinds[name] = value.metadata[_KIND_KEY]
        for f in getattr(klass, "__dataclass_fields__", {}).values():
            if _KIND_KEY in f.metadata:
                kinds[f.name] = f.metadata[_KIND_KEY]
    return tuple(sorted(kinds.items()))


DATA_TYPES: set[type] = set()
"""Types ``register_data_type`` declared data (a registry, like JAX's pytree registry)."""


class AttributeStatus(NamedTuple):
    """Whether an attribute is data, and whether that was declared rather than inferred."""

    is_data: bool
    explicit: bool


def register_data_type(type_: T, /) -> T:
    """Declares ``type_`` data (no ``nnx.data`` needed for its values); usable as a decorator.

    >>> import dataclasses, jax, flaxgraph as nnx
    >>> @nnx.register_data_type
    ... @dataclasses.dataclass(frozen=True)
    ... class Tag:
    ...   value: int
    >>> class Foo(nnx.Pytree):
    ...   def __init__(self):
    ...     self.tag = Tag(1); self.name = 'foo'
    >>> nnx.is_data(Tag(1)), jax.tree.leaves(Foo())
    (True, [Tag(value=1)])
    """
    DATA_TYPES.add(type_)  # type: ignore[arg-type]
    return type_


def is_data(value: Any, /) -> bool:
    """Whether ``value`` is of a data type: an array, a Variable, a graph node or a registered type.

    Containers are not data types (see ``has_data``).

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> nnx.is_data(jnp.ones(1)), nnx.is_data(nnx.Param(1)), nnx.is_data([jnp.ones(1)])
    (True, True, False)
    """
    return REGISTRY.kind_of(value) in _DATA_KINDS or type(value) in DATA_TYPES


_DATA_KINDS = frozenset({NODE, VARIABLE, ARRAY})
"""The engine's kinds that are data by themselves: graph nodes, Variables, arrays."""


def has_data(value: Any, /) -> list[Any]:
    """The data values (``is_data``) in the pytree ``value``, in pytree order.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> nnx.has_data({'a': jnp.zeros(1), 'b': 'x'}), nnx.has_data((1, 2))
    ([Array([0.], dtype=float32)], [])
    """
    return [x for x in jax.tree.leaves(value, is_leaf=is_data) if is_data(x)]
