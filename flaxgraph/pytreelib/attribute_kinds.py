"""Data and static attributes: ``nnx.data``/``nnx.static`` markers and field
specifiers, the deprecated ``nnx.Data[T]``/``nnx.Static[T]`` annotations, and the
data types (``is_data``, ``has_data``, ``register_data_type``).

A ``Pytree`` attribute is *data* (a pytree child, a State leaf) or *static* (part
of the pytree's aux data and of the GraphDef). The choice is automatic (arrays,
Variables, graph nodes, registered data types and containers holding them are
data) unless an attribute is marked: on assignment (``self.n = nnx.data(3)``) or
at class level (``n: int = nnx.data()``, also the field specifiers of
``nnx.dataclass``).

Source: Flax NNX 0.12 ``nnx.data``, ``nnx.static``, ``nnx.Data``, ``nnx.Static``,
``nnx.is_data``, ``nnx.has_data``, ``nnx.register_data_type``.
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
    """Marks an attribute as data: a pytree child and a State leaf even if it is not
    an array.

    In the graph view (``split``, ``state``, the transforms) a marked value that is
    not a container is one State leaf (``nnx.data(0)``); a marked container (a list,
    dict, tuple, State or other pytree node) is walked as any container is: its
    arrays, Variables and objects are State leaves and its other values (dtypes,
    strings, ints) stay static, as in Flax NNX 0.12's graph view. In the pytree view
    (``jax.tree.leaves(obj)``) the whole value is a child.

    Two uses:

    * on assignment, ``self.step = nnx.data(0)``: returns a marker that the
      assignment unwraps (the attribute holds ``0``);
    * as a class-level field specifier, ``step: int = nnx.data(default=0)`` or
      ``layers: list = nnx.data()``: returns a ``dataclasses.field`` (keyword
      arguments go to it) that marks the attribute for every instance; works with
      ``nnx.dataclass`` and in plain Pytree classes.

    Raises:
      TypeError: a value and keyword arguments together.

    Example::

      >>> import jax, flaxgraph as nnx
      >>> class Foo(nnx.Pytree):
      ...   def __init__(self):
      ...     self.count = nnx.data(42); self.name = 'foo'
      >>> jax.tree.leaves(Foo())
      [42]

    Source: Flax NNX 0.12 ``nnx.data``.
    """
    return _mark(DATA, value, kwargs)


def static(value: Any = _NO_VALUE, /, **kwargs: Any) -> Any:
    """Marks an attribute as static: it goes into the pytree's static part and the
    GraphDef (so it must be hashable). Same two uses as ``data``: on assignment
    (``self.n = nnx.static(3)``) or as a field specifier (``n: int = nnx.static(default=3)``).

    Raises:
      TypeError: a value and keyword arguments together.

    Example::

      >>> import jax, jax.numpy as jnp, flaxgraph as nnx
      >>> @nnx.dataclass
      ... class Conf(nnx.Pytree):
      ...   w: jax.Array
      ...   n: int = nnx.static(default=3)
      >>> jax.tree.leaves(Conf(jnp.ones(1)))
      [Array([1.], dtype=float32)]

    Source: Flax NNX 0.12 ``nnx.static``.
    """
    return _mark(STATIC, value, kwargs)


class _AnnotationMarker:
    __slots__ = ("kind",)

    def __init__(self, kind: str):
        self.kind = kind

    def __repr__(self) -> str:
        return f"nnx.{self.kind}"


DataAnnotation = "__data__"
"""Flax's marker string: ``typing.Annotated[T, DataAnnotation]`` declares data, as
``nnx.Data[T]`` does."""
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
    """``x: nnx.Data[T]`` marks a class attribute as data for every instance.
    Deprecated (emits ``DeprecationWarning``): write ``x: T = nnx.data()``.

    Example::

      >>> import warnings, jax, flaxgraph as nnx
      >>> with warnings.catch_warnings(record=True) as caught:
      ...   warnings.simplefilter('always')
      ...   class Foo(nnx.Pytree):
      ...     n: nnx.Data[int]
      ...     def __init__(self):
      ...       self.n = 3
      >>> jax.tree.leaves(Foo()), caught[0].category.__name__
      ([3], 'DeprecationWarning')

    Source: Flax NNX 0.12 ``nnx.Data``.
    """

    def __class_getitem__(cls, item: Any) -> Any:
        _deprecated("Data")
        return Annotated[item, _DATA_MARKER]


class Static:
    """``x: nnx.Static[T]`` marks a class attribute as static for every instance.
    Deprecated (emits ``DeprecationWarning``): write ``x: T = nnx.static()``.

    Example: as ``Data``, with the attribute kept out of the leaves.

    Source: Flax NNX 0.12 ``nnx.Static``.
    """

    def __class_getitem__(cls, item: Any) -> Any:
        _deprecated("Static")
        return Annotated[item, _STATIC_MARKER]


_STRING_MARK = re.compile(r"(?:^|[\s\[.,])(Data|Static)\[")


def class_kinds(cls: type) -> tuple[tuple[str, str], ...]:
    """The attribute kinds a class declares: ``nnx.data()``/``nnx.static()`` fields
    and (deprecated) ``nnx.Data[...]``/``nnx.Static[...]`` annotations, base classes
    first."""
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


DATA_REGISTRY = DATA_TYPES
"""Flax's name of :data:`DATA_TYPES`."""


class AttributeStatus(NamedTuple):
    """Whether an attribute is data, and whether that was declared (``nnx.data``/
    ``nnx.static``, an annotation) rather than inferred from its value."""

    is_data: bool
    explicit: bool


def register_data_type(type_: T, /) -> T:
    """Declares ``type_`` data: a value of this type assigned to a Pytree attribute is
    a pytree child and a State leaf without ``nnx.data(...)``. Usable as a decorator.

    Example::

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

    Source: Flax NNX 0.12 ``nnx.register_data_type``.
    """
    DATA_TYPES.add(type_)  # type: ignore[arg-type]
    return type_


def is_data(value: Any, /) -> bool:
    """Whether ``value`` is of a data type: an array (JAX or NumPy), a Variable, a
    graph node (``Pytree``, ``Module``, ``Rngs``…, registered node types) or a type
    given to ``register_data_type``. Containers are not data types themselves (see
    ``has_data``), though an attribute holding a list of arrays is data.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> nnx.is_data(jnp.ones(1)), nnx.is_data(nnx.Param(1)), nnx.is_data([jnp.ones(1)])
      (True, True, False)

    Source: Flax NNX 0.12 ``nnx.is_data``.
    """
    return REGISTRY.kind_of(value) in _DATA_KINDS or type(value) in DATA_TYPES


_DATA_KINDS = frozenset({NODE, VARIABLE, ARRAY})
"""The engine's kinds that are data by themselves: graph nodes, Variables, arrays."""


def has_data(value: Any, /) -> list[Any]:
    """Returns the data values (``is_data``) found in the pytree ``value``, in
    pytree order; empty if it holds none.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> nnx.has_data({'a': jnp.zeros(1), 'b': 'x'}), nnx.has_data((1, 2))
      ([Array([0.], dtype=float32)], [])

    Source: Flax NNX 0.12 ``nnx.has_data``.
    """
    return [x for x in jax.tree.leaves(value, is_leaf=is_data) if is_data(x)]
