"""Static values in a GraphDef: structural ``functools.partial`` keys and the error for
an unhashable static value.

A static attribute (an int, a string, a config object, a function) is stored in the
``GraphDef``, and a GraphDef is a jit cache key, so two models built the same way
should give equal GraphDefs. ``functools.partial`` compares by identity, so Flax's
CNN tutorial pattern ``self.avg_pool = partial(nnx.avg_pool, window_shape=(2, 2))``
would give every model a new GraphDef (and every ``nnx.jit`` call on a new model a
new compilation). The GraphDef therefore stores a partial as a ``PartialKey``, which
compares and hashes by function, arguments and keywords (recursively), and gives the
partial itself back when the graph is rebuilt.

An unhashable static value (a non-frozen dataclass config) is fine in a GraphDef for
``split``/``merge`` and the transforms (whose cache keys compare it with ``==``, as
JAX compares a treedef's auxiliary data; see ``graphdefs.lenient_hash``); only
hashing the GraphDef itself needs it hashable. ``unhashable_static_error`` then
names the value's path and the fix.

Source: Flax NNX 0.12 (static attributes live in the GraphDef); the structural
partial key is flaxgraph's.
"""

from __future__ import annotations

import functools
from typing import Any

from flaxgraph.errors import StaticAttributeError, numbered_fixes


class PartialKey:
    """A ``functools.partial`` as a GraphDef sees it: equal to another PartialKey of
    a partial with the same function, arguments and keywords (nested partials
    compared the same way), hashable when those are.

    Attributes:
      partial: the partial itself (what ``merge`` puts back).

    Example::

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
    """The error for an unhashable static value met where a GraphDef is hashed (a jit
    cache key), naming its path ``where`` and the fixes."""
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
