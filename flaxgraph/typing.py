"""Type aliases shared by the whole package: ``Key`` (one path step), ``PathParts`` (a path,
``('layers', 0, 'kernel')``), the ``MISSING`` sentinel, the layers' argument types.

Source: Flax's ``flax.typing`` (the same names)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Final, Protocol, TypeVar

import jax

Key = Hashable
PathParts = tuple[Key, ...]


class Missing:
    """The type of ``MISSING``, the one "nothing given / nothing there" sentinel."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"

    def __reduce__(self) -> str:
        return "MISSING"  # pickles as the one instance


MISSING: Final[Any] = Missing()
"""The package's one "not given / not there" sentinel (test it with ``is``; typed ``Any`` to
default a parameter of any type)."""

# -- the layers' argument types ---------------------------------------------------------

Array = jax.Array | Any
Dtype = jax.typing.DTypeLike | Any
Shape = Sequence[int]
Initializer = jax.nn.initializers.Initializer | Callable[..., Any]
PrecisionLike = (
    None | str | jax.lax.Precision | tuple[str, str] | tuple[jax.lax.Precision, jax.lax.Precision]
)
DotGeneralT = Callable[..., Array]  # jax.lax.dot_general's signature
ConvGeneralDilatedT = Callable[..., Array]  # jax.lax.conv_general_dilated's signature
EinsumT = Callable[..., Array]  # jnp.einsum's signature
PaddingLike = str | int | Sequence[int | tuple[int, int]]
LaxPadding = str | Sequence[tuple[int, int]]

TupleArg = TypeVar("TupleArg", bound=tuple[Any, ...])


class PromoteDtypeFn(Protocol):
    """A dtype promotion function (``promote_dtype=``): ``fn(args, /, *, dtype=None,
    inexact=True)`` returns ``args`` with its arrays cast to one dtype."""

    def __call__(
        self, args: TupleArg, /, *, dtype: Any = None, inexact: bool = True
    ) -> TupleArg: ...
