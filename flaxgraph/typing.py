"""Type aliases shared by the whole package (the names of Flax's ``flax.typing``).

* ``Key``: one step of a path into a graph or a State (an attribute name, a list
  index, a dict key).
* ``PathParts``: a path, the keys from the root to a value, e.g.
  ``('layers', 0, 'kernel')``.
* ``MISSING`` (of type ``Missing``): the sentinel for "not given" and "not there".
* The layers' argument types, for annotations (``flaxgraph.nn``'s modules re-export them
  where Flax's do): ``Array``, ``Dtype``, ``Shape``, ``Initializer``, ``PrecisionLike``,
  ``DotGeneralT``, ``ConvGeneralDilatedT``, ``EinsumT``, ``PaddingLike``, ``LaxPadding``
  and the ``PromoteDtypeFn`` protocol (``flaxgraph.nn.dtypes.promote_dtype`` is one).

Source: Flax's ``flax.typing`` (the same names).
"""

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
"""The package's one sentinel: the default of a parameter that was not given, and what
``NodeTypeImpl.get_child`` returns for a key a node lacks. Test it with ``is``. Typed
``Any`` so that it can stand as the default of a parameter of any type."""

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
    """A dtype promotion function, as layers take one (``promote_dtype=``):
    ``fn(args, /, *, dtype=None, inexact=True)`` returns the tuple ``args`` with its arrays
    cast to one dtype (``dtype``, else their common one; inexact if ``inexact``).

    Source: Flax's ``flax.typing.PromoteDtypeFn``.
    """

    def __call__(
        self, args: TupleArg, /, *, dtype: Any = None, inexact: bool = True
    ) -> TupleArg: ...
