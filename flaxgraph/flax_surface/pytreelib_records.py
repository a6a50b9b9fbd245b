"""Flax's ``pytreelib`` names flaxgraph's object model does not need (``PytreeMeta``, records).

They keep code naming them working, with Flax's behaviour where they have one (the
records render as Flax's). Source: Flax NNX 0.12.8 ``flax.nnx.pytreelib``.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Iterator
from typing import Any

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
class ArrayRepr(reprlib.Representable):
    """Renders as ``Array(shape=(2, 3), dtype=float32)``: an array's shape, not its values."""

    shape: tuple[int, ...]
    dtype: Any

    @staticmethod
    def from_array(array: Any) -> ArrayRepr:
        """The record of ``array`` (a JAX or NumPy array)."""
        return ArrayRepr(array.shape, array.dtype)

    def __nnx_repr__(self) -> Iterator[reprlib.Object | reprlib.Attr]:
        yield reprlib.Object(type="Array", same_line=True)
        yield reprlib.Attr("shape", self.shape)
        yield reprlib.Attr("dtype", self.dtype)


@dataclasses.dataclass(frozen=True, repr=False)
class MutableArrayRepr(reprlib.Representable):
    """Renders as ``ArrayRef(shape=..., dtype=...)``: a ``jax.Ref``'s shape."""

    shape: tuple[int, ...]
    dtype: Any

    @staticmethod
    def from_array(array: Any) -> MutableArrayRepr:
        """The record of ``array`` (a ``jax.Ref`` or array)."""
        return MutableArrayRepr(array.shape, array.dtype)

    def __nnx_repr__(self) -> Iterator[reprlib.Object | reprlib.Attr]:
        yield reprlib.Object(type="ArrayRef", same_line=True)
        yield reprlib.Attr("shape", self.shape)
        yield reprlib.Attr("dtype", self.dtype)


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
