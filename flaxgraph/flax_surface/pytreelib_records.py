"""Flax's ``pytreelib`` names flaxgraph's object model does not need (``PytreeMeta``, records).

They keep code naming them working, with Flax's behaviour where they have one (the
records render as Flax's). Source: Flax NNX 0.12.8 ``flax.nnx.pytreelib``.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Iterator
from typing import Any, ClassVar, Self

from flaxgraph import reprlib
from flaxgraph.variablelib import Variable

BUILDING_DOCS = "FLAX_DOC_BUILD" in os.environ
"""Whether Flax's documentation is being built (the ``FLAX_DOC_BUILD`` environment variable)."""


class PytreeMeta(type):
    """Flax's metaclass of ``Pytree`` (flaxgraph's is ``type``); a metaclass may derive from it."""


@dataclasses.dataclass
class ObjectContext(threading.local):
    """Flax's per-thread display state (which objects a ``repr`` has seen, their sizes)."""

    seen_modules_repr: set[int] | None = None
    node_stats: dict[int, dict[type[Variable[Any]], Any]] | None = None


OBJECT_CONTEXT = ObjectContext()
"""This thread's :class:`ObjectContext`."""


@dataclasses.dataclass(frozen=True, repr=False)
class _ShapeRecord(reprlib.Representable):
    """An array's shape and dtype, rendered as ``<_TYPE>(shape=..., dtype=...)``."""

    _TYPE: ClassVar[str]
    shape: tuple[int, ...]
    dtype: Any

    @classmethod
    def from_array(cls, array: Any) -> Self:
        """The record of ``array`` (a JAX or NumPy array, or a ``jax.Ref``)."""
        return cls(array.shape, array.dtype)

    def __nnx_repr__(self) -> Iterator[reprlib.Object | reprlib.Attr]:
        yield reprlib.Object(type=self._TYPE, same_line=True)
        yield reprlib.Attr("shape", self.shape)
        yield reprlib.Attr("dtype", self.dtype)


@dataclasses.dataclass(frozen=True, repr=False)
class ArrayRepr(_ShapeRecord):
    """Renders as ``Array(shape=(2, 3), dtype=float32)``: an array's shape, not its values."""

    _TYPE: ClassVar[str] = "Array"


@dataclasses.dataclass(frozen=True, repr=False)
class MutableArrayRepr(_ShapeRecord):
    """Renders as ``ArrayRef(shape=..., dtype=...)``: a ``jax.Ref``'s shape."""

    _TYPE: ClassVar[str] = "ArrayRef"


@dataclasses.dataclass(frozen=True, repr=False)
class VariableRepr(reprlib.Representable):
    """A Variable's type, value and metadata; renders as that Variable does."""

    var_type: type[Variable[Any]]
    value: Any
    metadata: dict[str, Any]

    def __nnx_repr__(self) -> Iterator[reprlib.Object | reprlib.Attr]:
        yield reprlib.Object(type=self.var_type)
        yield reprlib.Attr("value", self.value)
        for key, value in self.metadata.items():
            yield reprlib.Attr(key, value)

    def __repr__(self) -> str:
        return repr(self.var_type.from_metadata(self.value, self.metadata))
