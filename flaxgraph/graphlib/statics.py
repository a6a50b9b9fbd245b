"""Static values in a GraphDef: structural ``functools.partial`` keys, the unhashable error.

A partial compares by identity, so ``self.pool = partial(nnx.avg_pool, ...)`` would
give every model its own GraphDef (and jit compilation); the GraphDef stores a
``PartialKey`` instead. Unhashable statics: ``docs/design.md``, "Records: the GraphDef".
Source: Flax NNX 0.12 (static attributes live in the GraphDef).
"""

from __future__ import annotations

import functools
from typing import Any

from flaxgraph.errors import StaticAttributeError, numbered_fixes


class PartialKey:
    """A ``functools.partial`` as a GraphDef sees it: compared by function, arguments, keywords.

    Attributes:
      partial: the partial itself (what ``merge`` puts back).

    >>> import functools, operator
    >>> a = PartialKey(functools.partial(operator.add, 1))
    >>> b = PartialKey(functools.partial(operator.add, 1))
    >>> a == b, hash(a) == hash(b)
    (True, True)
    """

    __slots__ = ("partial", "_key")

    def __init__(self, partial: functools.partial[Any]):
        self.partial = partial
        keywords = tuple(sorted((k, structural(v)) for k, v in partial.keywords.items()))
        self._key = (
            type(partial),
            structural(partial.func),
            tuple(structural(a) for a in partial.args),
            keywords,
        )

    def __eq__(self, other: object) -> bool:
        return self is other or (type(other) is PartialKey and self._key == other._key)

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return repr(self.partial)


def structural(x: object) -> object:
    """``x`` as it is compared inside a GraphDef: a ``PartialKey`` for a partial."""
    return PartialKey(x) if isinstance(x, functools.partial) else x


def unwrap(x: object) -> object:
    """The value a static definition stands for (the partial of a ``PartialKey``)."""
    return x.partial if type(x) is PartialKey else x


def unhashable_static_error(
    where: str, value: object, what: str = "static attribute"
) -> StaticAttributeError:
    """The error for an unhashable static where a GraphDef is hashed: its path ``where``, fixes."""
    return StaticAttributeError(
        f"The {what} at {where} is a {type(value).__name__}, which is unhashable, so "
        "the GraphDef holding it cannot be hashed (a dict key, jax.jit's "
        "static_argnums). split/merge and nnx transforms work without it.\n"
        + numbered_fixes(
            [
                "make the value hashable: a frozen dataclass "
                "(@dataclasses.dataclass(frozen=True)), a tuple instead of a list…;",
                "or, if it holds arrays, wrap the arrays in a Variable (nnx.Variable(x)) or "
                "register the type as a JAX pytree so its arrays become state.",
            ]
        )
    )


def is_unhashable(x: object) -> bool:
    """Whether ``hash(x)`` fails."""
    try:
        hash(x)
    except TypeError:
        return True
    return False


__all__ = ["PartialKey", "structural", "unwrap", "unhashable_static_error", "is_unhashable"]
